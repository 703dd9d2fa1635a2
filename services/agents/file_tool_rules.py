"""What the agents' file tools share: the path rules, the numbered view of a file and the
head-and-tail cut of a long answer.

Two families use them: the worktree tools (code_tools.py: the live checkout, which then
also checks where links lead) and the repository tools (repo_tools.py: git objects at a
revision); the analysis sandbox cuts what a script printed the same way. One copy of each
rule, so a path refused by one family is refused, with the same reason, by the other.
"""
from __future__ import annotations

from pathlib import PurePosixPath

from services.core.errors import ValidationError


class PathRefused(ValidationError):
    code = "path_refused"


def path_parts(raw: str | None, *, place: str, git_hint: str, allow_root: bool = False,
               refuse_dash: bool = False) -> tuple[str, ...]:
    """The components of a path relative to the root of `place` ("worktree", "repository"),
    () for the root itself when `allow_root`; else PathRefused saying why.

    Refused: NUL, an absolute or home path, `..`, anything under `.git` (`git_hint` says what
    to use instead) and, with `refuse_dash`, a leading '-' that git would read as an option.
    These are the rules on the text only; where a link on disk leads is the caller's check."""
    text = (raw or "").strip()
    if "\x00" in text:
        raise PathRefused("Paths cannot contain NUL characters.", field="path")
    if text in ("", ".", "./"):
        if allow_root:
            return ()
        raise PathRefused("Give a file path relative to the repository root, e.g. src/train.py.", field="path")
    if text.startswith(("/", "~", "\\")):
        raise PathRefused(f"{raw!r} is an absolute path; paths are relative to the repository root "
                          f"(e.g. src/train.py) and cannot leave the {place}.", field="path")
    if refuse_dash and text.startswith("-"):
        raise PathRefused(f"{raw!r} starts with '-'; paths cannot start with a dash (it would read as an "
                          "option).", field="path")
    parts = PurePosixPath(text).parts
    if ".." in parts:
        raise PathRefused(f"{raw!r} contains '..'; paths cannot leave the {place}.", field="path")
    if ".git" in parts:
        raise PathRefused(f"{raw!r} is git metadata; {git_hint}", field="path")
    return parts


def numbered_lines(path: str, lines: list[str], start_line, end_line, *, header_prefix: str = "") -> str:
    """The file as the read tools show it: a header naming the lines shown, then each line
    with its number; only start_line..end_line when given. A start past the end is refused
    (the model asked for lines that are not there), an end past it is cut to the end."""
    start = max(int(start_line or 1), 1)
    end = min(int(end_line or len(lines)), len(lines))
    if lines and start > len(lines):
        raise ValidationError(f"{path} has {len(lines)} lines; start_line {start} is past the end.",
                              field="start_line")
    width = len(str(end or 1))
    body = "\n".join(f"{n:>{width}}| {lines[n - 1]}" for n in range(start, end + 1))
    header = f"{header_prefix}{path} (lines {start}-{end} of {len(lines)})" if lines else f"{path} (empty)"
    return f"{header}\n{body}"


def clip_middle(text: str, limit: int) -> str:
    """Head and tail of a long text, so both the start and the end (the verdict, the error)
    show; the middle is replaced by how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit:,} characters cut] …\n{text[-half:]}"
