"""The code section of the experiment page: branch, commits, the diff per file, test verdict.

The diff is highlighted without marking anything safe (STYLE §14): Pygments only splits
each line into (token class, text) pairs, and the template escapes every text as usual.
Everything comes from the database (services.agents.code_tools records each commit with
the branch's diff), so any web host can show it, not only the one with the worktrees.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlalchemy as sa
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

from models import CodeCommit, Experiment, WorkflowEvent, db

MAX_LINES = 4000          # diff lines rendered on the page in all
MAX_LINE_CHARS = 400
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass
class DiffLine:
    kind: str              # add | del | ctx | hunk
    old_no: int | None
    new_no: int | None
    tokens: list[tuple[str, str]]


@dataclass
class DiffFile:
    path: str
    status: str = "modified"   # added | deleted | modified | renamed
    old_path: str | None = None
    additions: int = 0
    deletions: int = 0
    binary: bool = False
    lines: list[DiffLine] = field(default_factory=list)


@dataclass
class CodeView:
    branch: str
    commits: list[CodeCommit]
    shown: CodeCommit | None
    files: list[DiffFile]
    truncated: bool
    test: dict | None          # the latest epm:test-verdict's metadata, with its note and time
    spliced: bool


def _css(token_type) -> str:
    while token_type not in STANDARD_TYPES and token_type.parent is not None:
        token_type = token_type.parent
    return STANDARD_TYPES.get(token_type) or "x"


def _lexer(path: str):
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _tokens(lexer, text: str) -> list[tuple[str, str]]:
    text = text[:MAX_LINE_CHARS] + ("…" if len(text) > MAX_LINE_CHARS else "")
    if not text:
        return []
    return [(_css(kind), value) for kind, value in lexer.get_tokens(text) if value and value != "\n"]


def parse_diff(text: str, max_lines: int = MAX_LINES) -> tuple[list[DiffFile], bool]:
    """A `git diff` as files of numbered, tokenized lines; True when lines were left out."""
    files: list[DiffFile] = []
    current: DiffFile | None = None
    lexer = None
    old_no = new_no = 0
    shown = 0
    truncated = False
    for raw in text.splitlines():
        if raw.startswith("diff --git "):
            match = re.match(r"diff --git a/(.*) b/(.*)$", raw)
            path = match.group(2) if match else raw[len("diff --git "):]
            current = DiffFile(path=path, old_path=match.group(1) if match else None)
            lexer = _lexer(path)
            files.append(current)
            continue
        if current is None:
            continue
        if raw.startswith("new file mode"):
            current.status = "added"
        elif raw.startswith("deleted file mode"):
            current.status = "deleted"
        elif raw.startswith("rename to "):
            current.status = "renamed"
        elif raw.startswith("Binary files "):
            current.binary = True
        elif raw.startswith(("--- ", "+++ ", "index ", "similarity ", "rename from ", "old mode", "new mode")):
            continue
        elif raw.startswith("@@"):
            match = _HUNK.match(raw)
            if match:
                old_no, new_no = int(match.group(1)), int(match.group(2))
            if shown < max_lines:
                current.lines.append(DiffLine("hunk", None, None, [("hunk", raw)]))
                shown += 1
        elif raw.startswith(("+", "-", " ")) or raw == "":
            kind = {"+": "add", "-": "del"}.get(raw[:1], "ctx")
            if kind == "add":
                current.additions += 1
            elif kind == "del":
                current.deletions += 1
            if shown < max_lines:
                current.lines.append(DiffLine(kind, None if kind == "add" else old_no,
                                              None if kind == "del" else new_no, _tokens(lexer, raw[1:])))
                shown += 1
            else:
                truncated = True
            old_no += kind != "add"
            new_no += kind != "del"
    return files, truncated


def commits_of(experiment: Experiment) -> list[CodeCommit]:
    return list(db.session.scalars(sa.select(CodeCommit).where(CodeCommit.experiment_id == experiment.id)
                                   .order_by(CodeCommit.created_at.desc())))


def latest_test_verdict(experiment: Experiment) -> dict | None:
    event = db.session.scalar(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker == "epm:test-verdict")
        .order_by(WorkflowEvent.created_at.desc()).limit(1))
    if event is None:
        return None
    return {**(event.metadata_ or {}), "note": event.note, "at": event.created_at}


def page_context(experiment: Experiment) -> dict:
    """`code` for templates/experiments/_code.html (None when the experiment has no code yet)."""
    commits = commits_of(experiment)
    test = latest_test_verdict(experiment)
    if not commits and test is None:
        return {"code": None}
    shown = next((c for c in commits if c.sha == experiment.git_commit), None) or (commits[0] if commits else None)
    files, truncated = parse_diff(shown.diff) if shown else ([], False)
    branch = experiment.git_branch or (commits[0].branch if commits else f"experiment-{experiment.number}")
    return {"code": CodeView(branch=branch, commits=commits, shown=shown, files=files,
                             truncated=truncated or bool(shown and shown.diff_truncated_from), test=test,
                             spliced=bool(experiment.git_commit and shown and shown.sha == experiment.git_commit))}
