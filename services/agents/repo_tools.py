"""Read-only repository tools for the agents that reason about the code (planner, critics,
analyzer, orchestrator, reconciler): list, read and search files, and read the history.

They read **git objects at a revision** of Sagan's bare clone of the research repository
(services.code.workspaces.mirror_for_reading) — never a working tree. So nothing can be
written, there is no directory to escape, and a symbolic link is a blob holding its target:
it is shown as a link and never followed. The revision is the experiment's branch once it
has one (the implementer's commits, pushed or not), else the repository's default branch;
a tool may name another revision (a branch or a commit), checked before git sees it.

The names are distinct from the code agents' worktree tools (`list_files`, `read_file`,
`search` in code_tools.py) because they read something else — committed code at a
revision, not the live worktree — and an agent's tool list should say which it gets
(docs/decisions.md).

Path rules are the implementer's: relative to the repository root, no `..`, no absolute
paths, nothing under `.git`; and nothing may start with `-`, so no input becomes a git
option. Output is capped and passes the redactor.
"""
from __future__ import annotations

import re
from pathlib import PurePosixPath

from models import db
from services.agents.file_tool_rules import PathRefused, clip_middle, numbered_lines, path_parts
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.code import workspaces
from services.core.errors import ValidationError
from services.core.redact import redact

REPO_TOOLS = ("repo_list_files", "repo_read_file", "repo_search", "git_log", "git_show")
OUTPUT_SHOWN = 60_000
LIST_MAX = 1000
READ_MAX_BYTES = 2_000_000
SEARCH_MAX_MATCHES = 200
SEARCH_TIMEOUT = 30
LOG_MAX = 100
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/~^-]{0,199}")
_SYMLINK_MODE = "120000"
_SUBMODULE_MODE = "160000"

_REVISION_INPUT = {"type": "string", "maxLength": 200,
                   "description": "a branch or commit; default the experiment's branch, else the default branch"}


# --- checking input ------------------------------------------------------------------------

def clean_path(raw: str | None, *, allow_root: bool = False) -> str:
    """A repository-relative path as git names it ('' for the root), or PathRefused (the
    worktree tools' rules, and no leading '-': git would read it as an option)."""
    parts = path_parts(raw, place="repository", allow_root=allow_root, refuse_dash=True,
                       git_hint="use git_log and git_show for history.")
    return PurePosixPath(*parts).as_posix() if parts else ""


def check_revision(raw: str) -> str:
    text = (raw or "").strip()
    if text.startswith("-"):
        raise ValidationError(f"{raw!r} starts with '-'; a revision is a branch name or a commit, never an "
                              "option.", field="revision", code="revision_refused")
    if not _REVISION.fullmatch(text) or ".." in text or "@{" in text:
        raise ValidationError(f"{raw!r} is not a revision this tool reads: name a branch (e.g. main) or a "
                              "commit (a hex sha), optionally with ~N or ^.", field="revision",
                              code="revision_refused")
    return text


def _clip(text: str) -> str:
    return clip_middle(text, OUTPUT_SHOWN)


# --- where to read ------------------------------------------------------------------------------

class Source:
    """One resolved revision of the clone: the commit every call of a tool reads."""

    def __init__(self, mirror, commit: str, label: str):
        self.mirror, self.commit, self.label = mirror, commit, label

    def git(self, *args: str, check: bool = True, timeout: float | None = None):
        return workspaces.read_git(self.mirror, *args, check=check, timeout=timeout)

    def object_at(self, path: str) -> tuple[str, str, str] | None:
        """(mode, type, sha) of `path` at the commit, or None when it does not exist there."""
        if not path:
            return ("040000", "tree", self.commit)
        out = self.git("ls-tree", "-z", "--full-tree", self.commit, "--", path).stdout
        for entry in out.split("\0"):
            meta, _, name = entry.partition("\t")
            if name == path:
                mode, kind, sha = meta.split()
                return mode, kind, sha
        return None


def _resolve(mirror, revision: str) -> str | None:
    for candidate in (f"refs/heads/{revision}", f"refs/remotes/origin/{revision}", revision):
        result = workspaces.read_git(mirror, "rev-parse", "--verify", "--quiet", "--end-of-options",
                                     candidate + "^{commit}", check=False)
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip()
    return None


def source(ctx: ToolContext, revision: str | None = None) -> Source:
    """The clone at the revision asked for, or at the experiment's branch, or the default branch.

    The session's transaction is committed first: a first clone can take minutes, and on
    SQLite an open transaction would hold the database's write lock meanwhile.
    """
    repo = workspaces.repo_settings()
    experiment = ctx.experiment
    # The branch the experiment runs (set by the code loop or the owner), else the code
    # loop's own branch name, which exists once the implementer committed.
    branches = [b for b in ((experiment.git_branch or "").strip(), workspaces.branch_name(experiment))
                if b and _REVISION.fullmatch(b)] if experiment is not None else []
    db.session.commit()
    mirror = workspaces.mirror_for_reading(repo)
    if revision:
        wanted = check_revision(revision)
        commit = _resolve(mirror, wanted)
        if commit is None:
            raise ValidationError(f"The research repository has no branch or commit {wanted!r}.", field="revision",
                                  code="no_such_revision")
        return Source(mirror, commit, wanted)
    for branch in dict.fromkeys(branches):
        commit = _resolve(mirror, branch)
        if commit is not None:
            return Source(mirror, commit, branch)
    commit = _resolve(mirror, repo[1])
    if commit is None:
        raise workspaces.WorkspaceError(f"The research repository has no branch {repo[1]!r}; check the default "
                                        "branch in Settings.", code="no_default_branch")
    return Source(mirror, commit, repo[1])


def _header(src: Source) -> str:
    return f"[{src.label} @ {src.commit[:12]}]"


# --- the tools ---------------------------------------------------------------------------------

@tool("repo_list_files", "List files and folders of the research repository at the experiment's branch (or the "
                         "default branch, or `revision`); symbolic links show their target and are not followed.",
      {"path": {"type": "string", "maxLength": 1000, "description": "folder to list; default the root"},
       "revision": _REVISION_INPUT}, own_transaction=True)
def repo_list_files(ctx: ToolContext, data: dict) -> ToolResult:
    path = clean_path(data.get("path"), allow_root=True)
    src = source(ctx, data.get("revision"))
    found = src.object_at(path)
    if found is None:
        raise PathRefused(f"{path!r} does not exist at {src.label}.", field="path")
    if found[1] != "tree":
        raise PathRefused(f"{path!r} is a file, not a folder; read it with repo_read_file.", field="path")
    args = ["ls-tree", "-r", "-t", "-z", "--full-tree", src.commit]
    if path:
        args += ["--", path + "/"]
    lines = []
    for entry in src.git(*args).stdout.split("\0"):
        if not entry:
            continue
        meta, _, name = entry.partition("\t")
        mode, kind, sha = meta.split()
        if mode == _SYMLINK_MODE:
            target = src.git("cat-file", "blob", sha).stdout[:300]
            lines.append(f"{name} -> {target} (symbolic link; not followed)")
        elif mode == _SUBMODULE_MODE:
            lines.append(f"{name}/ (submodule at {sha[:12]}; not included)")
        elif kind == "tree":
            lines.append(name + "/")
        else:
            lines.append(name)
        if len(lines) >= LIST_MAX:
            lines.append(f"… (stopped at {LIST_MAX} entries; list a subfolder)")
            break
    return ToolResult(redact(_header(src) + "\n" + ("\n".join(lines) or "(empty)")))


@tool("repo_read_file", "Read a text file of the research repository at the experiment's branch (or `revision`), "
                        "with line numbers; optionally only lines start..end.",
      {"path": {"type": "string", "maxLength": 1000}, "start_line": {"type": "integer"},
       "end_line": {"type": "integer"}, "revision": _REVISION_INPUT}, ["path"], own_transaction=True)
def repo_read_file(ctx: ToolContext, data: dict) -> ToolResult:
    path = clean_path(data["path"])
    src = source(ctx, data.get("revision"))
    found = src.object_at(path)
    if found is None:
        raise PathRefused(f"{path!r} does not exist at {src.label}; list the folder with repo_list_files.",
                          field="path")
    mode, kind, sha = found
    if mode == _SYMLINK_MODE:
        target = src.git("cat-file", "blob", sha).stdout[:300]
        return ToolResult(f"{path} is a symbolic link to {target!r}; links are not followed. If the target is "
                          "inside the repository, read that path.")
    if kind != "blob":
        raise PathRefused(f"{path!r} is a folder; list it with repo_list_files.", field="path")
    size = int(src.git("cat-file", "-s", sha).stdout.strip())
    if size > READ_MAX_BYTES:
        raise ValidationError(f"{path} is {size:,} bytes; find the lines with repo_search and read a range.",
                              field="path")
    raw = src.git("cat-file", "blob", sha).stdout
    if "\x00" in raw[:8192]:
        return ToolResult(f"{path} is a binary file ({size:,} bytes); not shown.")
    view = numbered_lines(path, raw.splitlines(), data.get("start_line"), data.get("end_line"),
                          header_prefix=f"{_header(src)} ")
    return ToolResult(redact(_clip(view)))


def _glob_pathspec(glob: str) -> str:
    text = glob.strip()
    if not text or text.startswith(("-", "/", ":")) or ".." in PurePosixPath(text).parts or "\x00" in text:
        raise ValidationError(f"{glob!r} is not a file pattern this tool takes: use one like *.py or src/*.yaml.",
                              field="glob")
    return f":(glob){text}" if "/" in text else f":(glob)**/{text}"


@tool("repo_search", "Search the research repository's text files at the experiment's branch (or `revision`) with "
                     "an extended regular expression (git grep -E); lists path:line: text.",
      {"pattern": {"type": "string", "maxLength": 500}, "path": {"type": "string", "maxLength": 1000},
       "glob": {"type": "string", "maxLength": 200, "description": "only files matching, e.g. *.py"},
       "ignore_case": {"type": "boolean"}, "revision": _REVISION_INPUT}, ["pattern"], own_transaction=True)
def repo_search(ctx: ToolContext, data: dict) -> ToolResult:
    pattern = data["pattern"]
    if not pattern.strip() or "\x00" in pattern or "\n" in pattern:
        raise ValidationError("Give a one-line pattern to search for.", field="pattern")
    path = clean_path(data.get("path"), allow_root=True)
    pathspecs = [f":(literal){path}"] if path else []
    if data.get("glob"):
        pathspecs.append(_glob_pathspec(data["glob"]))
    src = source(ctx, data.get("revision"))
    args = ["--no-literal-pathspecs", "grep", "-z", "-n", "-I", "-E", "--no-color", "--full-name"]
    if data.get("ignore_case"):
        args.append("-i")
    # -e keeps the pattern a pattern even when it starts with '-'.
    result = src.git(*args, "-e", pattern, src.commit, "--", *pathspecs, check=False, timeout=SEARCH_TIMEOUT)
    if result.returncode == 1 and not result.stdout:
        return ToolResult(f"{_header(src)} No matches.")
    if result.returncode not in (0, 1):
        raise ValidationError(f"The search failed: {result.stderr.strip()[-500:]}", field="pattern")
    prefix = src.commit + ":"
    lines = []
    for line in result.stdout.splitlines():
        name, _, rest = line.partition("\0")
        number, _, text = rest.partition("\0")
        lines.append(f"{name.removeprefix(prefix)}:{number}: {text[:300]}")
        if len(lines) >= SEARCH_MAX_MATCHES:
            lines.append(f"… (stopped at {SEARCH_MAX_MATCHES} matches; narrow the search)")
            break
    return ToolResult(redact(_clip(_header(src) + "\n" + "\n".join(lines))))


@tool("git_log", "The research repository's history at the experiment's branch (or `revision`), newest first; "
                 "optionally only commits touching `path`.",
      {"path": {"type": "string", "maxLength": 1000}, "revision": _REVISION_INPUT,
       "limit": {"type": "integer", "description": f"at most {LOG_MAX}; default 20"}}, own_transaction=True)
def git_log(ctx: ToolContext, data: dict) -> ToolResult:
    path = clean_path(data.get("path"), allow_root=True)
    limit = max(1, min(int(data.get("limit") or 20), LOG_MAX))
    src = source(ctx, data.get("revision"))
    out = src.git("log", "--no-color", f"--max-count={limit}", "--date=short",
                  "--format=%h %ad %an%n    %s", src.commit, "--", *([path] if path else [])).stdout
    return ToolResult(redact(_clip(_header(src) + "\n" + (out.strip() or "(no commits)"))))


@tool("git_show", "One commit of the research repository: message, changed files and diff (optionally of one path).",
      {"commit": {"type": "string", "maxLength": 200}, "path": {"type": "string", "maxLength": 1000}},
      ["commit"], own_transaction=True)
def git_show(ctx: ToolContext, data: dict) -> ToolResult:
    path = clean_path(data.get("path"), allow_root=True)
    src = source(ctx, data["commit"])
    out = src.git("show", "--no-color", "--no-ext-diff", "--no-textconv", "--stat", "--patch", "--format=fuller",
                  src.commit, "--", *([path] if path else [])).stdout
    return ToolResult(redact(_clip(out)))
