"""A folder swapped for a symbolic link mid-call never redirects the code tools.

The attack as reproduced: a process running as the sandbox user (the worktree's owner —
a local pod, or code left running) keeps swapping a worktree folder for a link to a folder
it may not touch, and back. Sagan's tool checked the path, then opened it by name: 15 of
300 writes landed in the root-owned folder, and the chown that followed handed the file to
the attacker. Here a real swapper process runs while the real tools are called hundreds
of times; nothing may ever be written, read, listed or chowned outside the worktree.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import pytest

from models import db
from tests.integration.code_fixtures import call, research_repo, tool_context  # noqa: F401

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI", "") not in ("1", "true"),
                                reason="bubblewrap is not installed (make test installs it on Debian)")

TRIES = 300
SECRET = "TOP-SECRET-never-leaves"

# The swapper runs as the sandbox user, inside the worktree. It watches `sub` with inotify
# and, the moment Sagan closes a file it wrote there, swaps `sub` for a link to the target
# — which is when today's write_file hands the file over with a chown by path — then puts
# the folder back for the next try. Between events it also keeps swapping blindly, so a
# check-then-open anywhere else is exercised too. Every step may fail (a tool may have made
# a new `sub` in a gap); the swapper then clears the way and carries on.
SWAPPER = r"""
import ctypes, os, select, shutil, sys, time
os.chdir(sys.argv[1])
target = sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
IN_CLOSE_WRITE = 0x8
watcher = libc.inotify_init1(os.O_NONBLOCK)
libc.inotify_add_watch(watcher, b"sub", IN_CLOSE_WRITE)  # follows the folder's inode, whatever its name


def restore():
    if os.path.lexists("sub.real"):
        if os.path.islink("sub"):
            os.unlink("sub")
        elif os.path.isdir("sub"):
            shutil.rmtree("sub")
        os.rename("sub.real", "sub")


def to_link():
    if not os.path.lexists("sub.tmp"):
        os.symlink(target, "sub.tmp")
    os.rename("sub", "sub.real")
    os.rename("sub.tmp", "sub")  # the link appears atomically


print("swapping", flush=True)
while True:
    try:
        restore()
        if select.select([watcher], [], [], 0.002)[0]:
            os.read(watcher, 65536)
            to_link()
            time.sleep(0.01)  # long enough for the tool to finish with the path
        else:
            to_link()
    except OSError:
        pass
"""


@pytest.fixture
def swapped(app, research_repo, make_experiment, tmp_path):  # noqa: F811
    """An implementer's context, a worktree with `sub/`, a root-owned folder outside, and a
    swapper process (as the sandbox user when the suite runs as root) started and stopped."""
    number = make_experiment("Races in the worktree", status="implementing")
    with app.app_context():
        ctx = tool_context(number)
        assert not call(ctx, "write_file", path="sub/secret.txt", content="harmless\n").is_error
        worktree = research_repo.worktree(number)
        outside = tmp_path / "root-only"
        outside.mkdir(mode=0o755)
        (outside / "secret.txt").write_text(SECRET + "\n")
        (outside / "only-outside.txt").write_text(SECRET + "\n")
        as_user = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam(app.config["SAGAN_SANDBOX_USER"] or "nobody")
            as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # nobody can run it
        swapper = subprocess.Popen([python, "-c", SWAPPER, str(worktree), str(outside)], stdout=subprocess.PIPE,
                                   text=True, **as_user)
        try:
            if os.geteuid() == 0:  # keep it on a CPU however busy the machine is: the race needs it running
                os.setpriority(os.PRIO_PROCESS, swapper.pid, -20)
            assert swapper.stdout.readline().strip() == "swapping"
            yield ctx, worktree, outside
        finally:
            swapper.kill()
            swapper.wait()
            db.session.remove()


def _reset(outside) -> None:
    for entry in os.scandir(outside):
        if entry.name not in ("secret.txt", "only-outside.txt"):
            os.unlink(entry.path)
    (outside / "secret.txt").write_text(SECRET + "\n")
    if os.geteuid() == 0:
        os.chown(outside / "secret.txt", 0, 0)


def _harm(outside) -> list[str]:
    """What changed in the folder outside: new files, or files no longer root's."""
    found = []
    for entry in os.scandir(outside):
        if entry.name not in ("secret.txt", "only-outside.txt"):
            found.append(f"{entry.name} written outside")
        elif os.geteuid() == 0 and entry.stat(follow_symlinks=False).st_uid != 0:
            found.append(f"{entry.name} handed to the sandbox user")
    return found


@pytest.mark.slow
def test_writes_never_land_outside_while_a_folder_is_swapped(swapped):
    """write_file into a folder being swapped: written inside, or refused; never outside."""
    ctx, worktree, outside = swapped
    outcomes = {"written": 0, "refused": 0}
    harmed = 0
    for i in range(TRIES):
        # The name exists outside too: a write or chown that follows the swapped link would
        # truncate the outside file or hand it to the sandbox user.
        result = call(ctx, "write_file", path="sub/secret.txt", content=f"attempt {i}\n" * 20_000)
        outcomes["refused" if result.is_error else "written"] += 1
        if result.is_error:  # refused with a reason (the folder was a link or missing at that instant)
            assert result.content.startswith(("path_refused:", "workspace_error:")), result.content
        if _harm(outside) or (outside / "secret.txt").read_text() != SECRET + "\n":
            harmed += 1
            _reset(outside)  # count every success, not only the first
    assert harmed == 0, f"{harmed} of {TRIES} writes changed a file outside the worktree ({outcomes})"
    assert outcomes["written"] > 0, outcomes  # the race was really run, not always refused


@pytest.mark.slow
def test_reads_and_listings_never_show_what_is_outside_while_a_folder_is_swapped(swapped):
    """read_file, list_files and search of a swapped folder never see the outside's secret."""
    ctx, worktree, outside = swapped
    leaks = []
    for _ in range(TRIES // 3):
        for name, data in (("read_file", {"path": "sub/secret.txt"}), ("list_files", {"path": "sub"}),
                           ("search", {"pattern": "SECRET", "path": "sub"})):
            result = call(ctx, name, **data)
            if SECRET in result.content or "only-outside.txt" in result.content:
                leaks.append(name)
            assert not result.content.startswith("internal"), result.content
    assert leaks == [] and _harm(outside) == []
