"""The code tools and their sandbox: everything an agent does stays inside its worktree.

Real git, a real research repository (tests/fixtures/research_repo), real bubblewrap. Each
escape attempt is refused with an error the model can read, and nothing changes outside.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import CodeCommit, WorkflowEvent, db
from services.code import sandbox, workspaces
from services.workflow import experiments
from tests.integration.code_fixtures import call, git, research_repo, tool_context  # noqa: F401

# Without bubblewrap the code tools refuse to run anything; `make test` installs it. Under CI
# nothing may be missing, so there these tests run (and fail, saying what to install).
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI", "") not in ("1", "true"),
                                reason="bubblewrap is not installed (make test installs it on Debian)")


@pytest.fixture
def implementer(app, research_repo, make_experiment):  # noqa: F811
    """An implementer's tool context on a fresh experiment, inside an app context."""
    number = make_experiment("Code in a sandbox", status="implementing")
    with app.app_context():
        yield tool_context(number)
        db.session.remove()


# --- files -----------------------------------------------------------------------------------

def test_first_tool_call_creates_the_worktree_on_the_experiment_branch(implementer, research_repo):  # noqa: F811
    """Does the first call check out experiment-<n> from main, owned by the sandbox user?"""
    result = call(implementer, "list_files")
    assert not result.is_error, result.content
    assert result.content.splitlines() == [".gitignore", "README.md", "run.py", "stats.py", "test_stats.py"]
    path = research_repo.worktree(implementer.experiment.number)
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=path) == f"experiment-{implementer.experiment.number}"
    if os.geteuid() == 0:
        assert path.stat().st_uid == sandbox.sandbox_user().pw_uid


def test_read_file_shows_numbered_lines_and_ranges(implementer):
    """Does read_file number lines and honour start_line/end_line?"""
    whole = call(implementer, "read_file", path="stats.py")
    assert "stats.py (lines 1-6 of 6)" in whole.content and "6|     return sum(values) / (len(values) + 1)" in whole.content
    part = call(implementer, "read_file", path="stats.py", start_line=4, end_line=4)
    assert part.content.splitlines() == ["stats.py (lines 4-4 of 6)", "4| def mean(values):"]


@pytest.mark.parametrize("path, why", [
    ("../outside.txt", "contains '..'"),
    ("src/../../etc/passwd", "contains '..'"),
    ("/etc/passwd", "absolute path"),
    ("~/.bashrc", "absolute path"),
    (".git/config", "git metadata"),
    ("sub/.git/hooks/pre-commit", "git metadata"),
])
def test_paths_outside_the_worktree_are_refused(implementer, path, why):
    """Are '..', absolute paths and .git refused for reads and writes, with the reason?"""
    for name, data in (("read_file", {"path": path}), ("write_file", {"path": path, "content": "x"}),
                       ("list_files", {"path": path})):
        result = call(implementer, name, **data)
        assert result.is_error and result.content.startswith("path_refused:"), (name, result.content)
        assert why in result.content
    assert not os.path.exists("/outside.txt")


def test_symlinks_out_of_the_worktree_are_refused(implementer, research_repo):  # noqa: F811
    """Is a symbolic link to /etc (made by Sagan or by sandboxed code) never followed?"""
    call(implementer, "list_files")
    worktree = research_repo.worktree(implementer.experiment.number)
    os.symlink("/etc", worktree / "etc_link")
    ran = call(implementer, "run_command", command="python3 -c \"import os; os.symlink('/root', 'home_link')\"")
    assert "exit 0" in ran.content, ran.content
    for path in ("etc_link/passwd", "home_link/.bashrc", "etc_link"):
        result = call(implementer, "read_file", path=path)
        assert result.is_error and "symbolic link that points outside the worktree" in result.content, result.content
    written = call(implementer, "write_file", path="etc_link/evil.conf", content="x")
    assert written.is_error and not os.path.exists("/etc/evil.conf")
    listing = call(implementer, "list_files").content
    assert "etc_link -> /etc" in listing and "passwd" not in listing
    found = call(implementer, "search", pattern="root:").content
    assert found == "No matches."


def test_write_then_patch_then_commit_records_the_commit(implementer, research_repo):  # noqa: F811
    """write_file, apply_patch and git_commit land one commit, kept with the branch diff."""
    assert not call(implementer, "write_file", path="notes/plan.md", content="# Plan\n").is_error
    patch = ("--- a/stats.py\n+++ b/stats.py\n@@ -5,2 +5,2 @@ def mean(values):\n"
             '     """The arithmetic mean of a sequence of numbers."""\n'
             "-    return sum(values) / (len(values) + 1)\n+    return sum(values) / len(values)\n")
    applied = call(implementer, "apply_patch", patch=patch)
    assert not applied.is_error, applied.content
    committed = call(implementer, "git_commit", message="Fix the mean and add notes")
    assert committed.content.startswith("Committed ") and "2 file(s)" in committed.content, committed.content
    row = db.session.scalar(sa.select(CodeCommit))
    assert row.branch == f"experiment-{implementer.experiment.number}" and row.round == 1
    assert "+    return sum(values) / len(values)" in row.diff and "notes/plan.md" in row.diff
    assert row.sha == git("rev-parse", "HEAD", cwd=research_repo.worktree(implementer.experiment.number))
    note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.event_type == "note",
                                                                 WorkflowEvent.note.like("Committed %")))
    assert note == f"Committed {row.sha[:12]} on {row.branch}: Fix the mean and add notes"
    if os.geteuid() == 0:
        owner = (research_repo.worktree(implementer.experiment.number) / "notes" / "plan.md").stat().st_uid
        assert owner == sandbox.sandbox_user().pw_uid
    assert call(implementer, "git_commit", message="again").content.startswith("Nothing to commit")


def test_patches_are_applied_as_the_sandbox_user(implementer, research_repo):  # noqa: F811
    """git apply runs inside the sandbox: what it creates belongs to the sandbox user, and a
    folder it writes through could only ever lead where sandboxed code may write anyway."""
    patch = "--- /dev/null\n+++ b/notes/new.md\n@@ -0,0 +1 @@\n+hello\n"
    applied = call(implementer, "apply_patch", patch=patch)
    assert not applied.is_error and "notes/new.md" in applied.content, applied.content
    created = research_repo.worktree(implementer.experiment.number) / "notes" / "new.md"
    assert created.read_text() == "hello\n"
    if os.geteuid() == 0:
        assert created.stat().st_uid == created.parent.stat().st_uid == sandbox.sandbox_user().pw_uid


def test_a_patch_whose_hunks_do_not_apply_changes_nothing(implementer, research_repo):  # noqa: F811
    """Does apply_patch refuse a stale hunk, keep every file as it was and say how to fix it?"""
    call(implementer, "list_files")
    stats = research_repo.worktree(implementer.experiment.number) / "stats.py"
    before = stats.read_text()
    patch = ("--- a/stats.py\n+++ b/stats.py\n@@ -5,2 +5,2 @@\n"
             "     this line is not in the file\n-    return 0\n+    return 1\n"
             "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Tiny research repository (test fixture)\n+# Changed\n")
    result = call(implementer, "apply_patch", patch=patch)
    assert result.is_error and result.content.startswith("patch_does_not_apply:"), result.content
    assert "stats.py" in result.content
    assert stats.read_text() == before
    assert "# Tiny research repository" in (stats.parent / "README.md").read_text()
    outside = call(implementer, "apply_patch", patch="--- a/../x.py\n+++ b/../x.py\n@@ -0,0 +1 @@\n+x\n")
    assert outside.is_error and "contains '..'" in outside.content


def test_a_patch_with_miscounted_hunks_still_applies(implementer, research_repo):  # noqa: F811
    """Models miscount hunk lengths: is such a patch recounted rather than refused?"""
    patch = ("--- a/stats.py\n+++ b/stats.py\n@@ -5,9 +5,9 @@\n"
             '     """The arithmetic mean of a sequence of numbers."""\n'
             "-    return sum(values) / (len(values) + 1)\n+    return sum(values) / len(values)\n")
    result = call(implementer, "apply_patch", patch=patch)
    assert not result.is_error, result.content
    assert "return sum(values) / len(values)" in (research_repo.worktree(implementer.experiment.number)
                                                  / "stats.py").read_text()


def test_search_finds_lines_and_rejects_bad_patterns(implementer):
    """Does search list file:line: text, and refuse an invalid regex?"""
    result = call(implementer, "search", pattern=r"def \w+", glob="*.py")
    assert "stats.py:4: def mean(values):" in result.content
    assert call(implementer, "search", pattern="(").content.startswith("invalid_input:")


def test_search_skips_fifos_and_devices_instead_of_hanging(implementer, research_repo):  # noqa: F811
    """A FIFO in the worktree blocked search's open() until its 30 s timeout
    (and /dev/zero's twin would be read forever); now only regular files are read."""
    from services.agents import code_tools
    call(implementer, "list_files")
    worktree = research_repo.worktree(implementer.experiment.number)
    os.mkfifo(worktree / "a_pipe.py")
    if os.geteuid() == 0:
        os.mknod(worktree / "b_zero.py", 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
    started = time.monotonic()
    result = call(implementer, "search", pattern=r"def \w+", glob="*.py")
    assert time.monotonic() - started < code_tools.SEARCH_TIMEOUT / 3, result.content
    assert not result.is_error and "stats.py:4: def mean(values):" in result.content, result.content
    for path in ("a_pipe.py", "b_zero.py") if os.geteuid() == 0 else ("a_pipe.py",):
        started = time.monotonic()
        read = call(implementer, "read_file", path=path)
        assert read.is_error and "not a regular file" in read.content, read.content
        written = call(implementer, "write_file", path=path, content="x")
        assert written.is_error and written.content.startswith("path_refused:"), written.content
        assert time.monotonic() - started < 5


def test_write_file_refuses_a_file_with_another_hard_link(implementer, research_repo, tmp_path):  # noqa: F811
    """A hard link to a file outside would let a truncating write change that file too."""
    call(implementer, "list_files")
    worktree = research_repo.worktree(implementer.experiment.number)
    outside = worktree.parent / "outside-target.txt"  # same file system, outside the worktree
    outside.write_text("keep me\n")
    try:
        os.link(outside, worktree / "linked.txt")
        written = call(implementer, "write_file", path="linked.txt", content="overwritten\n")
        assert written.is_error and "another hard link" in written.content, written.content
        assert outside.read_text() == "keep me\n"
    finally:
        outside.unlink()


# --- commands ----------------------------------------------------------------------------------

def test_configured_test_command_runs_for_real_in_the_sandbox(implementer):
    """Does the repository's test command run in the worktree and show the failing test?"""
    result = call(implementer, "run_command", command="python3 -m unittest -v")
    assert "FAIL: test_mean_of_three_numbers" in result.content and "[exit 1 after" in result.content
    assert not result.is_error  # a failing test is information, not a refused call


@pytest.mark.parametrize("command, why", [
    ("bash -c 'cat /etc/shadow'", "'bash' is not an allowed command"),
    ("curl https://example.com", "'curl' is not an allowed command"),
    ("git push --force", "'git' is not an allowed command"),
    ("/usr/bin/python3 -c 1", "without a path"),
    ("python3 -m unittest | tee out.txt", "without a shell"),
    ("cat /etc/passwd", "names a path outside the worktree"),
    ("cat ../../secret", "names a path outside the worktree"),
    ("python3 --log=/tmp/x run.py", "names a path outside the worktree"),
])
def test_commands_outside_the_allowlist_are_refused(implementer, command, why):
    """Is every command outside the allowlist refused before anything runs, naming what is allowed?"""
    result = call(implementer, "run_command", command=command)
    assert result.is_error and result.content.startswith("command_refused:"), result.content
    assert why in result.content
    if "not an allowed command" in why:
        assert "python3 -m unittest -v" in result.content and "python3" in result.content


def test_a_command_past_its_timeout_is_killed(implementer, app, monkeypatch):
    """Is a command still running at the timeout killed, with its background children?"""
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_TIMEOUT_SECONDS", 2)
    started = time.monotonic()
    result = call(implementer, "run_command",
                  command="python3 -c \"import subprocess, time; subprocess.Popen(['sleep', '73.25']); "
                          "print('started', flush=True); time.sleep(60)\"")
    assert time.monotonic() - started < 15
    assert result.is_error and "still running after the 2 s timeout; the sandbox was killed" in result.content
    assert "started" in result.content
    # At once: a run returns only when its pid namespace is gone, background children and all.
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == "sleep 73.25"]
    assert leftovers == []


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_output_over_the_cap_stops_the_command(implementer, app, monkeypatch):
    """Is output past SAGAN_SANDBOX_OUTPUT_BYTES cut at the cap and the command stopped?"""
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_OUTPUT_BYTES", 10_000)
    result = call(implementer, "run_command",
                  command="python3 -c \"import sys\nwhile True: sys.stdout.write('x' * 1000)\"")
    assert result.is_error and "output passed the cap of 10,000 bytes" in result.content
    assert result.content.count("x") <= 10_100


def test_a_command_writing_past_the_worktree_quota_is_stopped(implementer, app, research_repo, monkeypatch):  # noqa: F811
    """RLIMIT_FSIZE caps each file, not their number, so a command writing
    many files could fill the disk; now the worktree's growth is capped per command."""
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_WORKTREE_WRITE_MB", 5)
    call(implementer, "list_files")
    worktree = research_repo.worktree(implementer.experiment.number)
    before = sandbox.disk_usage(worktree)
    # 100 files of 1 MiB, each well under the per-file limit; unchecked, 100 MiB.
    result = call(implementer, "run_command", command="python3 -c \"import time\nfor i in range(100):\n"
                  "    open(f'blob{i}.bin', 'wb').write(bytes(1 << 20)); time.sleep(0.02)\nprint('all written')\"")
    grown = (sandbox.disk_usage(worktree) - before) / (1 << 20)
    assert result.is_error and "wrote more than 5 MB into the worktree" in result.content, result.content
    assert "all written" not in result.content.splitlines()  # the command itself is echoed above
    assert 5 < grown < 40, grown  # stopped within a check interval or two of passing the quota
    # …and a command that stays under it runs as usual.
    for blob in worktree.glob("blob*.bin"):
        blob.unlink()
    small = call(implementer, "run_command", command="python3 -c \"open('small.bin', 'wb').write(bytes(1 << 20))\"")
    assert not small.is_error and "[exit 0" in small.content, small.content


def test_cpu_time_limit_kills_a_busy_loop(implementer, app, monkeypatch):
    """Does the CPU-time limit stop a spinning process even before the wall-clock timeout?"""
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_CPU_SECONDS", 1)
    result = call(implementer, "run_command", command="python3 -c \"while True: pass\"")
    assert "SIGXCPU (the CPU-time limit)" in result.content or "SIGKILL" in result.content, result.content


def test_sandbox_has_no_secrets_no_network_and_no_host_files(implementer, app, monkeypatch):
    """Does sandboxed code see none of Sagan's secrets, no network and nothing of the host?"""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-never-leak-1234")
    monkeypatch.setenv("RUNPOD_API_KEY_TEAM", "rp-should-never-leak")
    monkeypatch.setenv("DATABASE_URL", "postgresql://secret@db/sagan")
    probe = ("import json, os, socket\n"
             "out = {'env': dict(os.environ), 'uid': os.getuid(), 'root': sorted(os.listdir('/')),\n"
             "       'work': os.path.exists('/work'), 'instance': os.path.exists('" + str(app.config['SAGAN_WORKSPACES_DIR']) + "')}\n"
             "try:\n    socket.create_connection(('127.0.0.1', 6379), 2); out['redis'] = 'reached'\n"
             "except OSError as exc:\n    out['redis'] = str(exc)\n"
             "try:\n    socket.getaddrinfo('pypi.org', 443); out['dns'] = 'resolved'\n"
             "except OSError as exc:\n    out['dns'] = str(exc)\n"
             "try:\n    open('/usr/evil', 'w'); out['usr'] = 'written'\n"
             "except OSError as exc:\n    out['usr'] = exc.strerror\n"
             "print(json.dumps(out))\n")
    call(implementer, "write_file", path="probe.py", content=probe)
    result = call(implementer, "run_command", command="python3 probe.py")
    import json
    seen = json.loads(result.content.splitlines()[1])
    assert "ANTHROPIC_API_KEY" not in seen["env"] and "RUNPOD_API_KEY_TEAM" not in seen["env"]
    assert "DATABASE_URL" not in seen["env"] and "SECRET_KEY" not in seen["env"]
    assert "sk-ant-should-never-leak" not in result.content
    assert seen["env"]["HOME"] == "/tmp" and seen["env"]["PWD"] == "/worktree"
    assert seen["redis"] != "reached" and seen["dns"] != "resolved"
    assert seen["work"] is False and seen["instance"] is False and seen["usr"] == "Read-only file system"
    assert set(seen["root"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev",
                                 "tmp", "worktree"}
    if os.geteuid() == 0:
        assert seen["uid"] == sandbox.sandbox_user().pw_uid != 0


def test_reviewers_get_a_read_only_worktree(app, research_repo, make_experiment):  # noqa: F811
    """Can a reviewer run the tests but not change the code through a command?"""
    number = make_experiment("Review read-only", status="code_reviewing")
    with app.app_context():
        reviewer = tool_context(number, agent="code-reviewer")
        tests = call(reviewer, "run_command", command="python3 -m unittest -v")
        assert "Ran 2 tests" in tests.content and "read-only for this command" in tests.content
        write = call(reviewer, "run_command", command="python3 -c \"open('stats.py', 'w').write('')\"")
        assert "Read-only file system" in write.content
        assert "def mean" in (research_repo.worktree(number) / "stats.py").read_text()
        refused = call(reviewer, "write_file", path="x.py", content="")
        assert refused.is_error and "not allowed" in refused.content.lower()


def test_without_bubblewrap_commands_refuse_and_say_what_to_install(implementer, monkeypatch):
    """Where bwrap is missing, does run_command refuse instead of running code unconfined?"""
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    result = call(implementer, "run_command", command="python3 -m unittest -v")
    assert result.is_error and result.content.startswith("sandbox_unavailable:")
    assert "apt-get install bubblewrap" in result.content


# --- git ------------------------------------------------------------------------------------------

def test_push_with_force_is_refused_and_nothing_is_pushed(implementer, research_repo):  # noqa: F811
    """Is a forced push refused with the reason, leaving the remote untouched?"""
    call(implementer, "write_file", path="stats.py", content="def mean(values):\n    return 0\n")
    call(implementer, "git_commit", message="Break the mean")
    branch = f"experiment-{implementer.experiment.number}"
    refused = call(implementer, "git_push", force=True)
    assert refused.is_error and refused.content.startswith("force_push_refused:")
    assert research_repo.origin_sha(branch) is None
    pushed = call(implementer, "git_push")
    assert not pushed.is_error, pushed.content
    assert research_repo.origin_sha(branch) == db.session.scalar(sa.select(CodeCommit.sha))
    assert db.session.scalar(sa.select(CodeCommit.pushed_at)) is not None


def test_push_refuses_to_overwrite_a_remote_that_moved(implementer, research_repo, tmp_path):  # noqa: F811
    """When the remote branch has commits the worktree lacks, is the push refused (never forced)?"""
    branch = f"experiment-{implementer.experiment.number}"
    call(implementer, "write_file", path="a.txt", content="a\n")
    call(implementer, "git_commit", message="A")
    call(implementer, "git_push")
    other = tmp_path / "other"
    git("clone", "--quiet", str(research_repo.origin), str(other))
    git("checkout", "--quiet", branch, cwd=other)
    (other / "b.txt").write_text("b\n")
    git("add", "b.txt", cwd=other)
    git("commit", "--quiet", "-m", "B elsewhere", cwd=other)
    git("push", "--quiet", "origin", branch, cwd=other)
    remote = research_repo.origin_sha(branch)
    call(implementer, "write_file", path="c.txt", content="c\n")
    call(implementer, "git_commit", message="C")
    result = call(implementer, "git_push")
    assert result.is_error and result.content.startswith("push_rejected:") and "never force-pushes" in result.content
    assert research_repo.origin_sha(branch) == remote


def test_nested_git_metadata_blocks_commits(implementer, research_repo):  # noqa: F811
    """Does a planted sub/.git (whose config could run commands) stop git_commit?"""
    call(implementer, "run_command",
         command="python3 -c \"import os; os.makedirs('sub/.git'); open('sub/.git/config', 'w').write('x')\"")
    result = call(implementer, "git_commit", message="with a planted repo")
    assert result.is_error and result.content.startswith("nested_git:") and "sub/.git" in result.content


def test_git_diff_shows_the_branch_change(implementer):
    """Does git_diff show status and the diff against the default branch, uncommitted changes included?"""
    call(implementer, "write_file", path="stats.py", content="def mean(values):\n    return 42\n")
    result = call(implementer, "git_diff")
    assert "## git status" in result.content and " M stats.py" in result.content
    assert "+    return 42" in result.content


# --- the worktree ---------------------------------------------------------------------------------

def test_one_agent_at_a_time_per_worktree(implementer, app, monkeypatch):
    """While another call holds the worktree, does a second one give up with a clear error?"""
    call(implementer, "list_files")
    monkeypatch.setitem(app.config, "SAGAN_WORKSPACE_LOCK_WAIT_SECONDS", 0.3)
    with workspaces.locked(implementer.experiment):
        result = call(implementer, "read_file", path="stats.py")
    assert result.is_error and result.content.startswith("worktree_busy:")
    assert "Another agent is using the worktree" in result.content
    assert not call(implementer, "read_file", path="stats.py").is_error


def test_worktree_continues_the_pushed_branch_and_is_removed_when_closed(implementer, research_repo, app, worker):  # noqa: F811
    """A removed worktree comes back on the pushed branch; archiving the experiment removes it."""
    call(implementer, "write_file", path="a.txt", content="a\n")
    call(implementer, "git_commit", message="A")
    call(implementer, "git_push")
    experiment = implementer.experiment
    path = research_repo.worktree(experiment.number)
    assert workspaces.remove(experiment) and not path.exists()
    assert call(implementer, "read_file", path="a.txt").content.endswith("1| a")
    from services.core.actors import Actor
    from services.workflow import lifecycle
    effects = lifecycle.transition(experiments.get_experiment(experiment.number), "archived",
                                   Actor("owner", None, "Owner"), note="done with it")
    db.session.commit()
    lifecycle.run_side_effects(effects)
    worker()
    assert not path.exists()


def test_no_database_transaction_is_open_while_git_or_a_command_runs(implementer, monkeypatch):
    """A test suite can run for minutes: is the session's transaction closed meanwhile (on SQLite
    an open one would hold the write lock of the whole database)?"""
    seen = []
    real_run, real_push = sandbox.run, workspaces.push

    def watching_run(*args, **kwargs):
        seen.append(("run_command", db.session().in_transaction()))
        return real_run(*args, **kwargs)

    def watching_push(*args, **kwargs):
        seen.append(("git_push", db.session().in_transaction()))
        return real_push(*args, **kwargs)
    monkeypatch.setattr(sandbox, "run", watching_run)
    monkeypatch.setattr(workspaces, "push", watching_push)
    call(implementer, "list_files")  # the worktree exists; the next calls are plain
    call(implementer, "write_file", path="a.txt", content="a\n")
    call(implementer, "git_commit", message="A")
    assert "exit 0" in call(implementer, "run_command", command="python3 -c \"print('hi')\"").content
    assert not call(implementer, "git_push").is_error
    assert seen == [("run_command", False), ("git_push", False)]


@pytest.mark.skipif(os.geteuid() != 0, reason="accounts of their own need root (as in production)")
def test_a_run_on_an_account_of_its_own_waits_for_a_free_one_then_refuses(app, monkeypatch):
    """With every account of the pool held by another run, does an `own_account` run wait up to
    its timeout and then refuse clearly; once one is free, does it run as that account, and
    does a run that writes the worktree stay on the sandbox account?"""
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_USER", "sagan-slot-test")
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_ACCOUNTS", 1)
    folder = Path(tempfile.mkdtemp(prefix="sagan-accounts-", dir="/tmp"))  # pytest's tmp_path is root's alone
    folder.chmod(0o755)
    with app.app_context(), contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
        limits = sandbox.Limits.from_config(timeout=1)
        lock_path = sandbox._account_locks() / "sagan-slot-test-1.lock"
        held = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            started = time.monotonic()
            with pytest.raises(sandbox.SandboxUnavailable, match="All 1 sandbox accounts are busy"):
                sandbox.run(folder, ["id", "-u"], writable=False, limits=limits, own_account=True)
            assert 0.9 < time.monotonic() - started < 5
        finally:
            os.close(held)
        own = sandbox.run(folder, ["id", "-u"], writable=False, limits=limits, own_account=True)
        assert own.output.strip() == str(pwd.getpwnam("sagan-slot-test-1").pw_uid)
        shared = sandbox.run(folder, ["id", "-u"], writable=True, limits=limits, own_account=True)
        assert shared.output.strip() == str(pwd.getpwnam("sagan-slot-test").pw_uid)


def test_two_worktree_sandboxes_on_one_account_each_have_their_own_process_limit(app, monkeypatch):
    """The worktree sandboxes share one account (it owns the worktrees). While one of them
    holds every process its limit allows, does another, started then on the same account,
    run normally? (Without a pids cgroup per run it failed: "Creating new namespace failed".)"""
    import threading

    from services.code import pids_cgroup
    from tests.integration.test_analysis import FORK_BOMB, _live_processes_of
    if os.geteuid() != 0 or pids_cgroup.parent_folder() is None:
        pytest.skip("a pids cgroup per run needs root and a writable pids controller (as where Sagan runs as root)")
    account = "sagan-bomb-worktree"
    monkeypatch.setitem(app.config, "SAGAN_SANDBOX_USER", account)
    monkeypatch.setattr(sandbox, "PROCESS_LIMIT", 256)  # bounded for a shared 2-core test machine
    folder = Path(tempfile.mkdtemp(prefix="sagan-bomb-", dir="/tmp"))  # pytest's tmp_path is root's alone
    (folder / "bomb.py").write_text(FORK_BOMB % 10)
    with app.app_context():
        owner = sandbox.sandbox_user()
    os.chown(folder, owner.pw_uid, owner.pw_gid)
    bombed: dict = {}

    def bomb():
        with app.app_context():
            bombed["outcome"] = sandbox.run(folder, ["python3", "bomb.py"], writable=True,
                                            limits=sandbox.Limits.from_config(timeout=60))

    thread = threading.Thread(target=bomb)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(_live_processes_of(account)) < 0.9 * sandbox.PROCESS_LIMIT and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_live_processes_of(account)) >= 0.9 * sandbox.PROCESS_LIMIT, "the bomb never filled its limit"
        with app.app_context():
            calm = sandbox.run(folder, ["python3", "-c", "import os; open('calm', 'w').write('x'); print('calm as', os.getuid())"],
                               writable=True, limits=sandbox.Limits.from_config(timeout=30))
        assert calm.ok and f"calm as {owner.pw_uid}" in calm.output, calm.describe()
        assert (folder / "calm").exists()
    finally:
        thread.join(90)
        shutil.rmtree(folder, ignore_errors=True)
    outcome = bombed["outcome"]
    # It forked up to its own limit (the shell, setpriv, bwrap and python count too), not past it.
    assert outcome.ok and re.search(r"forked 2[0-5]\d as", outcome.output), outcome.describe()
    assert _live_processes_of(account) == []
    assert not list(pids_cgroup.parent_folder().iterdir()) or all(
        not (entry / "cgroup.procs").read_text().strip() for entry in pids_cgroup.parent_folder().iterdir()
        if entry.is_dir())
