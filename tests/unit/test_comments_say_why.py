"""Comments and docstrings say why the code is as it is, not which ticket brought it.

History belongs in git and in docs/decisions.md: an "issue 17 item 2" in a comment tells a
newcomer nothing they can read, and it ages as soon as the code moves. This walks every file
git tracks in the code folders (Python, templates, scripts, styles) and fails on any mention of
an issue number.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("*.py", "*.html", "*.js", "*.css", "*.sh", "Makefile", "*.toml", "*.ini")
# "issue 17", "issues 15 and 16", "issue #4", "issue-19": a ticket, whatever the spelling.
TICKET = re.compile(r"\bissues? ?[#-]? ?\d+\b", re.IGNORECASE)


def tracked_code_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *CODE],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if not name.startswith("static/vendor/")]


def test_no_comment_or_docstring_cites_an_issue_number():
    """Does any tracked code file mention an issue number (history that belongs in git)?"""
    this_file = Path(__file__).resolve()
    found = []
    for path in tracked_code_files():
        if path.resolve() == this_file or not path.exists():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if TICKET.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "Say why, not which issue:\n" + "\n".join(found)


def test_the_pattern_catches_the_spellings_it_is_for():
    """Would the check see the usual ways of citing a ticket, and leave ordinary words alone?"""
    for cited in ("(issue 17 item 2)", "Issue 18: does", "issues 15 and 16", "issue #4", "see issue-19"):
        assert TICKET.search(cited), cited
    for plain in ("an issue with the token", "the issuer", "tissue 5", "issued 3 tokens"):
        assert not TICKET.search(plain), plain
