"""Code tools for code-writing agents (SPEC §5.7): files, search, commands and git in the
experiment's own worktree, and nowhere else.

Every call takes the worktree's lock (services.code.workspaces.locked) for its whole duration,
so two agents never write one worktree at once. Paths are relative to the repository
root; absolute paths, `..`, anything under `.git` and symbolic links that lead out of the
worktree are refused before any file is touched; and since code running as the sandbox
user may swap a folder for a link at any moment, files are then opened, read, written and
handed over link by link without following any (services/code/worktree_io.py), so what was
checked is what is touched. Only regular files are read. Commands run only in the sandbox
(services.code.sandbox): the repository's configured test and lint commands, or one program
from SAGAN_SANDBOX_COMMANDS, without a shell. Agents that cannot write files (reviewers)
get the worktree read-only inside the sandbox too.

An agent whose definition lists any of these tools (loader.CODE_TOOLS) runs on the `local`
queue, the host that has the worktrees (services.workflow.jobs.job_for).
"""
from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath

from flask import current_app

from models import CodeCommit, db
from services.agents.code_state import current_round
from services.agents.file_tool_rules import PathRefused, clip_middle, numbered_lines, path_parts
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.claude import loader
from services.code import sandbox, workspaces, worktree_io
from services.core import events, settings
from services.core.clock import utcnow
from services.core.errors import Conflict, Forbidden, SaganError, ValidationError
from services.core.redact import redact

WRITE_TOOLS = ("write_file", "apply_patch", "git_commit")  # an agent with any of these may change code
OUTPUT_SHOWN = 60_000        # characters of command output or diff an agent sees per call
WRITE_MAX = 1_000_000        # bytes per write_file
READ_MAX_BYTES = 5_000_000   # files larger than this are not read whole
LIST_MAX = 1000
SEARCH_MAX_MATCHES = 200
SEARCH_TIMEOUT = 30
DIFF_STORED_MAX = 400_000    # bytes of the branch diff kept with each commit
_NO_SHELL = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1", "$(", "`"}


class CommandRefused(ValidationError):
    code = "command_refused"


# --- plumbing --------------------------------------------------------------------------------

def _definition_tools(ctx: ToolContext) -> tuple[str, ...]:
    try:
        return loader.get(ctx.run.agent).tools
    except SaganError:
        return ()


def require_tool(ctx: ToolContext, name: str) -> None:
    """Only agents whose definition lists a code tool may call it (a reviewer cannot write)."""
    if name not in _definition_tools(ctx):
        raise Forbidden(f"{name} is not allowed for {ctx.run.agent}: it is not one of its tools.",
                        code="tool_not_allowed")


def _in_worktree(ctx: ToolContext, work, name: str):
    """Run `work(ws)` holding the experiment's worktree; OS errors become readable results.

    The session's transaction is committed first, and nothing touches the database until
    `work` writes its results: a clone, a push or a test suite can take minutes, and on
    SQLite an open transaction holds the database's write lock (BEGIN IMMEDIATE).
    """
    require_tool(ctx, name)
    target = workspaces.Target.of(ctx.need_experiment())
    repo = workspaces.repo_settings()
    db.session.commit()
    with workspaces.locked(target):
        ws = workspaces.ensure(target, repo)
        try:
            return work(ws)
        except OSError as exc:
            raise workspaces.WorkspaceError(f"{exc.strerror or exc} ({exc.filename and _relative(ws, exc.filename)})") \
                from None


def _relative(ws: workspaces.Workspace, path) -> str:
    try:
        return os.path.relpath(os.path.realpath(path), os.path.realpath(ws.path))
    except ValueError:
        return "?"


def resolve(ws: workspaces.Workspace, raw: str, *, allow_root: bool = False) -> Path:
    """The real path of `raw` inside the worktree, or PathRefused saying why not: the shared
    rules on the text first, then where the links on the way lead."""
    parts = path_parts(raw, place="worktree", allow_root=allow_root,
                       git_hint="agents cannot touch it; use git_diff, git_commit and git_push.")
    root = Path(os.path.realpath(ws.path))
    real = Path(os.path.realpath(ws.path / Path(*parts)))
    if real != root and root not in real.parents:
        raise PathRefused(f"{raw!r} is (or passes through) a symbolic link that points outside the worktree; "
                          "refused.", field="path")
    if ".git" in real.relative_to(root).parts:
        raise PathRefused(f"{raw!r} leads into git metadata through a symbolic link; refused.", field="path")
    return real


def _root(ws: workspaces.Workspace) -> Path:
    return Path(os.path.realpath(ws.path))


def _parts(ws: workspaces.Workspace, real: Path) -> tuple[str, ...]:
    """The components of a resolved path below the worktree root, for worktree_io's no-follow walk."""
    return real.relative_to(_root(ws)).parts


def _clip(text: str) -> str:
    return clip_middle(text, OUTPUT_SHOWN)


def _can_write(ctx: ToolContext) -> bool:
    return any(name in _definition_tools(ctx) for name in WRITE_TOOLS)


# --- reading ---------------------------------------------------------------------------------

@tool("list_files", "List files and folders of the experiment's worktree (paths relative to the repository root).",
      {"path": {"type": "string", "maxLength": 1000, "description": "folder to list; default the root"}}, own_transaction=True)
def list_files(ctx: ToolContext, data: dict) -> ToolResult:
    def work(ws):
        start = resolve(ws, data.get("path") or ".", allow_root=True)
        if not start.is_dir():
            raise PathRefused(f"{data.get('path')!r} is not a folder.", field="path")
        prefix = _parts(ws, start)
        lines: list[str] = []
        # fwalk from a descriptor opened link by link: a folder swapped for a link while we
        # list is not entered (os.walk would list wherever the link points).
        with worktree_io.folder(_root(ws), prefix) as start_fd:
            for folder, dirs, files, folder_fd in os.fwalk(".", dir_fd=start_fd, follow_symlinks=False):
                dirs[:] = sorted(d for d in dirs if d != ".git")
                here = PurePosixPath(*prefix, *PurePosixPath(folder).parts)  # "./a" has the parts ("a",)
                for name in sorted(dirs) + sorted(f for f in files if not (here == PurePosixPath() and f == ".git")):
                    rel = (here / name).as_posix()
                    try:
                        mode = os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode
                    except FileNotFoundError:
                        continue
                    if stat.S_ISLNK(mode):
                        lines.append(f"{rel} -> {os.readlink(name, dir_fd=folder_fd)}")
                    elif stat.S_ISDIR(mode):
                        lines.append(rel + "/")
                    else:
                        lines.append(rel)
                    if len(lines) >= LIST_MAX:
                        lines.append(f"… (stopped at {LIST_MAX} entries; list a subfolder)")
                        return ToolResult("\n".join(lines))
        return ToolResult("\n".join(lines) or "(empty)")
    return _in_worktree(ctx, work, "list_files")


@tool("read_file", "Read a text file of the worktree, with line numbers; optionally only lines start..end.",
      {"path": {"type": "string", "maxLength": 1000}, "start_line": {"type": "integer"},
       "end_line": {"type": "integer"}}, ["path"], own_transaction=True)
def read_file(ctx: ToolContext, data: dict) -> ToolResult:
    def work(ws):
        path = resolve(ws, data["path"])
        raw, size = worktree_io.read_regular(_root(ws), _parts(ws, path), max_bytes=READ_MAX_BYTES)
        if raw is None:
            raise ValidationError(f"{data['path']} is {size:,} bytes; read it in line ranges "
                                  "after finding the lines with search.", field="path")
        if b"\x00" in raw[:8192]:
            return ToolResult(f"{data['path']} is a binary file ({len(raw):,} bytes); not shown.")
        lines = raw.decode("utf-8", errors="replace").splitlines()
        return ToolResult(_clip(numbered_lines(data["path"], lines, data.get("start_line"), data.get("end_line"))))
    return _in_worktree(ctx, work, "read_file")


# The search runs in a child process of Sagan's own interpreter so a pathological regex
# (catastrophic backtracking holds the GIL) can be stopped by a timeout. It reads only
# regular files, reached link by link without following any (the same walk as
# services/code/worktree_io.py, restated because this script cannot import Sagan): a FIFO would
# block the open until someone writes to it, and a device (/dev/zero) never ends.
_SEARCH_SCRIPT = r"""
import fnmatch, os, re, stat, sys
root, start, pattern, glob, flags, limit = sys.argv[1:7]
regex = re.compile(pattern, re.IGNORECASE if flags == "i" else 0)
DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
fd = os.open(root, DIR)
for part in [p for p in start.split("/") if p]:
    try:
        child = os.open(part, DIR, dir_fd=fd)
    except OSError:
        sys.exit(0)  # swapped for a link or removed since it was checked: nothing to search
    os.close(fd)
    fd = child
found = 0
for folder, dirs, files, folder_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
    dirs[:] = sorted(d for d in dirs if d != ".git")
    for name in sorted(files):
        rel = os.path.normpath(os.path.join(start, folder, name))
        if name == ".git" or (glob and not fnmatch.fnmatch(rel, glob) and not fnmatch.fnmatch(name, glob)):
            continue
        try:
            info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or info.st_size > 2_000_000:
                continue  # links, FIFOs, sockets, devices, large files
            handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
            try:
                opened = os.fstat(handle)
                if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                    continue  # swapped between the look and the open
                data = os.read(handle, 2_000_001)
            finally:
                os.close(handle)
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                print(f"{rel}:{number}: {line[:300]}")
                found += 1
                if found >= int(limit):
                    print(f"… (stopped at {limit} matches; narrow the search)")
                    sys.exit(0)
"""


@tool("search", "Search the worktree's text files with a Python regular expression; lists file:line: text.",
      {"pattern": {"type": "string", "maxLength": 500}, "path": {"type": "string", "maxLength": 1000},
       "glob": {"type": "string", "maxLength": 200, "description": "only files matching, e.g. *.py"},
       "ignore_case": {"type": "boolean"}}, ["pattern"], own_transaction=True)
def search(ctx: ToolContext, data: dict) -> ToolResult:
    import re
    try:
        re.compile(data["pattern"])
    except re.error as exc:
        raise ValidationError(f"The pattern is not a valid regular expression: {exc}.", field="pattern") from None

    def work(ws):
        start = resolve(ws, data.get("path") or ".", allow_root=True)
        if not start.is_dir():
            raise PathRefused(f"{data.get('path')!r} is not a folder; search a folder (or the root).", field="path")
        try:
            result = subprocess.run(
                [sys.executable, "-I", "-S", "-c", _SEARCH_SCRIPT, str(_root(ws)), "/".join(_parts(ws, start)),
                 data["pattern"], data.get("glob") or "", "i" if data.get("ignore_case") else "",
                 str(SEARCH_MAX_MATCHES)], capture_output=True, text=True, errors="replace",
                timeout=SEARCH_TIMEOUT, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        except subprocess.TimeoutExpired:
            raise ValidationError(f"The search took longer than {SEARCH_TIMEOUT} s and was stopped; simplify the "
                                  "pattern or narrow the path.", field="pattern") from None
        if result.returncode != 0:
            raise ValidationError(f"The search failed: {result.stderr.strip()[-500:]}", field="pattern")
        return ToolResult(_clip(result.stdout) or "No matches.")
    return _in_worktree(ctx, work, "search")


# --- writing -----------------------------------------------------------------------------------

@tool("write_file", "Create or replace a text file in the worktree with the given content.",
      {"path": {"type": "string", "maxLength": 1000}, "content": {"type": "string", "maxLength": WRITE_MAX}},
      ["path", "content"], own_transaction=True)
def write_file(ctx: ToolContext, data: dict) -> ToolResult:
    content = data["content"].encode()
    if len(content) > WRITE_MAX:
        raise ValidationError(f"The content is {len(content):,} bytes; the limit is {WRITE_MAX:,}.", field="content")

    def work(ws):
        path = resolve(ws, data["path"])
        existed = worktree_io.write_regular(_root(ws), _parts(ws, path), content, owner=workspaces.sandbox_owner())
        verb = "Replaced" if existed else "Created"
        return ToolResult(f"{verb} {path.relative_to(os.path.realpath(ws.path)).as_posix()} "
                          f"({len(content):,} bytes, {data['content'].count(chr(10)) + 1} lines).")
    return _in_worktree(ctx, work, "write_file")


def _patch_paths(patch: str) -> tuple[list[str], int]:
    """The file paths a unified diff names, and the -p level that strips its a/ b/ prefixes."""
    raw = []
    for line in patch.splitlines():
        if line.startswith(("--- ", "+++ ")):
            raw.append(line[4:].split("\t")[0].strip())
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            raw.append("b/" + line.split(" ", 2)[2].strip())
    named = [p for p in raw if p != "/dev/null"]
    if not named:
        raise ValidationError("That is not a unified diff: it has no '--- a/file' / '+++ b/file' headers.",
                              field="patch")
    strip = 1 if all(p.startswith(("a/", "b/")) for p in named) else 0
    return [p[2:] if strip else p for p in named], strip


@tool("apply_patch", "Apply a unified diff (git diff format) to the worktree; all hunks apply or nothing changes.",
      {"patch": {"type": "string", "maxLength": WRITE_MAX}}, ["patch"], own_transaction=True)
def apply_patch(ctx: ToolContext, data: dict) -> ToolResult:
    patch = data["patch"] if data["patch"].endswith("\n") else data["patch"] + "\n"
    paths, strip = _patch_paths(patch)

    def work(ws):
        for path in paths:
            resolve(ws, path)  # refuses absolute paths, '..', .git and links out of the worktree
        # Models often miscount hunk lengths; --recount forgives that, but misreads a patch of
        # several files without `diff --git` lines. Take the patch as written first.
        flags = [f"-p{strip}", "--whitespace=nowarn"]
        check = _git_apply_in_sandbox(ws, ["--check", "--verbose", *flags], patch, writable=False)
        if check.exit_code != 0:
            recounted = _git_apply_in_sandbox(ws, ["--check", *flags, "--recount"], patch, writable=False)
            if recounted.exit_code == 0:
                flags.append("--recount")
                check = recounted
        if check.exit_code != 0:
            raise ValidationError("The patch does not apply, so nothing was changed. Read the current lines "
                                  "with read_file and send a patch whose context matches them:\n"
                                  + check.output.strip()[-3000:], field="patch", code="patch_does_not_apply")
        applied = _git_apply_in_sandbox(ws, flags, patch, writable=True)
        if not applied.ok:
            raise workspaces.WorkspaceError(f"git apply failed: {applied.output.strip()[-2000:]} "
                                            f"{applied.status_line()}")
        touched = [path for path in dict.fromkeys(paths) if resolve(ws, path).exists()]
        return ToolResult(f"Applied the patch to {len(touched)} file(s): {', '.join(touched) or '(files removed)'}.")
    return _in_worktree(ctx, work, "apply_patch")


def _git_apply_in_sandbox(ws: workspaces.Workspace, args: list[str], patch: str, *, writable: bool):
    """`git apply` as the sandbox user inside the sandbox, never as Sagan: whatever links the
    worktree holds or grows meanwhile, the patch can only reach what sandboxed code could.
    GIT_DIR=/dev/null makes it a plain patch tool (the worktree's `.git` points at metadata
    the sandbox does not see)."""
    return sandbox.run(ws.path, ["git", "apply", *args], writable=writable, stdin=patch.encode(),
                       env={"GIT_DIR": "/dev/null"}, limits=sandbox.Limits.from_config(timeout=60.0),
                       shown_as="git apply " + " ".join(args))


# --- commands ----------------------------------------------------------------------------------

def configured_commands() -> dict[str, str]:
    """The repository's test and lint commands (SPEC §6.11), by their role."""
    commands = {}
    for role, key in (("test", "research_repo_test_command"), ("lint", "research_repo_lint_command")):
        value = (settings.get(key) or "").strip()
        if value:
            commands[role] = value
    return commands


def allowed_programs() -> list[str]:
    raw = current_app.config.get("SAGAN_SANDBOX_COMMANDS") or ""
    return [p.strip() for p in raw.split(",") if p.strip()]


def command_argv(command: str) -> list[str]:
    """What `command` runs as: a configured command through sh, or one allowlisted program.

    Raises CommandRefused with the reason and what is allowed.
    """
    command = command.strip()
    if not command:
        raise CommandRefused("Give a command to run.", field="command")
    configured = configured_commands()
    if command in configured.values():
        return ["sh", "-c", command]  # the owner's own command line (SPEC §6.11); may use a shell
    allowed = allowed_programs()
    described = "; ".join([f"the repository's {role} command `{c}`" for role, c in configured.items()]
                          + [f"one of these programs: {', '.join(allowed)}"])
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandRefused(f"Could not read that command line ({exc}).", field="command") from None
    program = argv[0]
    if "/" in program:
        raise CommandRefused(f"Name the program without a path ({program!r}). Allowed: {described}.",
                             field="command")
    if program not in allowed:
        raise CommandRefused(f"{program!r} is not an allowed command. Allowed: {described}.", field="command")
    if any(arg in _NO_SHELL or arg.startswith(("$(", "`")) for arg in argv[1:]):
        raise CommandRefused("Commands run without a shell, so pipes, redirections and && do nothing; run one "
                             "program at a time.", field="command")
    for arg in argv[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if value.startswith("/") or ".." in PurePosixPath(value).parts:
            raise CommandRefused(f"The argument {arg!r} names a path outside the worktree; commands may only "
                                 "use paths inside it (relative, without '..').", field="command")
    return argv


@tool("run_command", "Run the repository's test or lint command, or an allowed program, in the sandboxed worktree "
                     "(no network, time- and output-limited).",
      {"command": {"type": "string", "maxLength": 2000},
       "timeout_seconds": {"type": "integer", "description": "shorter than the configured limit, if you like"}},
      ["command"], own_transaction=True)
def run_command(ctx: ToolContext, data: dict) -> ToolResult:
    argv = command_argv(data["command"])
    limits = sandbox.Limits.from_config()
    if data.get("timeout_seconds"):
        limits = sandbox.Limits.from_config(timeout=float(max(1, min(int(data["timeout_seconds"]), limits.timeout))))
    writable = _can_write(ctx)

    def work(ws):
        outcome = sandbox.run(ws.path, argv, writable=writable, limits=limits, shown_as=data["command"].strip())
        text = outcome.describe()
        if not writable:
            text += "\n(The worktree was read-only for this command: reviewers do not change the code.)"
        return ToolResult(_clip(text), is_error=outcome.stopped)
    return _in_worktree(ctx, work, "run_command")


# --- git ------------------------------------------------------------------------------------------

@tool("git_diff", "Show what this experiment's branch changes: against the default branch (base, the default) "
                  "or only the uncommitted changes (head).",
      {"against": {"type": "string", "enum": ["base", "head"]}, "path": {"type": "string", "maxLength": 1000}}, own_transaction=True)
def git_diff(ctx: ToolContext, data: dict) -> ToolResult:
    def work(ws):
        workspaces.check_no_nested_git(ws)
        paths = ()
        if data.get("path"):
            real = resolve(ws, data["path"])
            paths = (real.relative_to(os.path.realpath(ws.path)).as_posix(),)
        against = data.get("against") or "base"
        revision = workspaces.base_commit(ws) if against == "base" else "HEAD"
        text = workspaces.diff(ws, revision, paths=paths)
        header = (f"## git status\n{workspaces.status(ws)}\n## diff against "
                  f"{'the default branch (' + ws.base_branch + ')' if against == 'base' else 'HEAD'}\n")
        return ToolResult(_clip(header + (text or "(no changes to tracked files)")))
    return _in_worktree(ctx, work, "git_diff")


@tool("git_commit", "Commit every change in the worktree to the experiment's branch with a message.",
      {"message": {"type": "string", "maxLength": 5000}}, ["message"], own_transaction=True)
def git_commit(ctx: ToolContext, data: dict) -> ToolResult:
    message = data["message"].strip()
    if not message:
        raise ValidationError("A commit needs a message saying what changed and why.", field="message")
    experiment, actor, run_id, agent = ctx.need_experiment(), ctx.actor, ctx.run.id, ctx.run.agent

    def work(ws):
        sha = workspaces.commit(ws, message + f"\n\nSagan-Run: {run_id}\n", author=f"Sagan {agent}")
        if sha is None:
            return ToolResult("Nothing to commit: the worktree has no changes.", is_error=True)
        with db.session.begin_nested():  # the commit's record and its timeline note land together
            row = record_commit(ws, experiment, sha, agent=agent, run_id=run_id)
            events.record(experiment, "note", actor,
                          note=f"Committed {row.short_sha} on {ws.branch}: {message.splitlines()[0][:200]}",
                          metadata={"commit": sha, "branch": ws.branch, "round": row.round, "run_id": str(run_id)})
        return ToolResult(f"Committed {row.short_sha} on {ws.branch} ({row.files_changed} file(s), "
                          f"+{row.insertions} −{row.deletions} against {ws.base_branch}). "
                          "Push it with git_push when the work is ready.")
    return _in_worktree(ctx, work, "git_commit")


def record_commit(ws: workspaces.Workspace, experiment, sha: str, *, agent: str | None, run_id=None) -> CodeCommit:
    """Keep a commit (and the branch's diff at it) where every process can read it."""
    existing = db.session.scalar(db.select(CodeCommit).where(CodeCommit.experiment_id == experiment.id,
                                                              CodeCommit.sha == sha))
    if existing is not None:
        return existing
    base = workspaces.base_commit(ws)
    parent = workspaces.git(ws, "rev-parse", "--verify", "--quiet", f"{sha}^", check=False).stdout.strip() or None
    # Stored text passes the redactor like everything else (SPEC §5.4); git keeps the real code.
    text = redact(workspaces.diff(ws, base, sha))
    encoded = text.encode()
    truncated_from = None
    if len(encoded) > DIFF_STORED_MAX:
        truncated_from = len(encoded)
        text = encoded[:DIFF_STORED_MAX].decode(errors="ignore")
    files, insertions, deletions = workspaces.diff_stats(ws, base, sha)
    message = redact(workspaces.git(ws, "log", "-1", "--format=%B", sha).stdout.strip())
    row = CodeCommit(experiment_id=experiment.id, agent_run_id=run_id, agent=agent, branch=ws.branch, sha=sha,
                     parent_sha=parent, base_sha=base, message=message[:20_000],
                     round=current_round(experiment), files_changed=files, insertions=insertions,
                     deletions=deletions, diff=text, diff_truncated_from=truncated_from)
    db.session.add(row)
    db.session.flush()
    return row


def mark_pushed(experiment, branch: str) -> None:
    now = utcnow()
    for row in db.session.scalars(db.select(CodeCommit).where(
            CodeCommit.experiment_id == experiment.id, CodeCommit.branch == branch, CodeCommit.pushed_at.is_(None))):
        row.pushed_at = now


@tool("git_push", "Push the experiment's branch to the research repository (fast-forward only; never forced).",
      {"force": {"type": "boolean", "description": "never allowed; here so a forced push is refused clearly"}}, own_transaction=True)
def git_push(ctx: ToolContext, data: dict) -> ToolResult:
    require_tool(ctx, "git_push")
    if data.get("force"):
        raise Conflict("Force pushes are never allowed: Sagan only pushes the experiment's branch as a "
                       "fast-forward, so no reviewed commit can disappear from the remote. Nothing was pushed.",
                       code="force_push_refused")
    experiment = ctx.need_experiment()

    def work(ws):
        sha = workspaces.push(ws)
        with db.session.begin_nested():
            mark_pushed(experiment, ws.branch)
        return ToolResult(f"Pushed {ws.branch} at {sha[:12]} to the research repository.")
    return _in_worktree(ctx, work, "git_push")
