"""Reading and writing files inside a worktree without ever following a link.

The worktree belongs to the sandbox user, and Sagan (often root) works in it while code
that user runs may be changing it. Checking a path first and opening it afterwards is a
race: between the two, a folder can be swapped for a symbolic link to anywhere, and the
open (or chown) lands outside (15 of 300 writes reached a root-owned
folder). So nothing here opens a path by its name from `/`: every component is opened
relative to the folder before it (`openat`), with O_NOFOLLOW, starting from the
worktree's root (whose own parents are Sagan's and cannot be swapped). A link met
anywhere on the way is an error, never a detour; what is finally opened is checked with
fstat on the open descriptor, which no later swap can change.

services/agents/code_tools.py still resolves paths first (for readable refusals); this
module is what makes the answer it got the one that is acted on. (apply_patch does not
come here: it runs `git apply` inside the sandbox, as the sandbox user.)
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path

from services.core.errors import ValidationError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must never wait for a writer (a FIFO is refused after fstat).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotInWorktree(ValidationError):
    """The path passes through a link, or is not a regular file: refused, nothing touched."""

    code = "path_refused"


def _refusal(shown: str, exc: OSError) -> NotInWorktree:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return NotInWorktree(f"{shown!r} passes through a symbolic link or a file (it changed while Sagan was "
                             "using it); refused, nothing was written.", field="path")
    return NotInWorktree(f"{shown!r}: {exc.strerror}.", field="path")


@contextmanager
def folder(root: Path, parts: tuple[str, ...], *, create: bool = False, owner: tuple[int, int] | None = None):
    """A descriptor for root/parts…, each component opened with no-follow from the one before.

    `create` makes missing folders (mode 0755), each given to `owner` (uid, gid) through
    its own descriptor, so the chown cannot be redirected either.
    """
    shown = "/".join(parts) or "."
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise NotInWorktree(f"{shown!r} does not exist in the worktree.", field="path") from None
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass  # made by someone else meanwhile: opened (no-follow) below like any other
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(shown, exc) from None
                if owner is not None:
                    os.fchown(child, *owner)
            except OSError as exc:
                raise _refusal(shown, exc) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def read_regular(root: Path, parts: tuple[str, ...], *, max_bytes: int) -> tuple[bytes | None, int]:
    """(content, size) of the regular file root/parts; content None when it is over `max_bytes`."""
    shown = "/".join(parts)
    with folder(root, parts[:-1]) as dir_fd:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise NotInWorktree(f"{shown!r} is not a file in the worktree.", field="path") from None
        except OSError as exc:
            raise _refusal(shown, exc) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotInWorktree(f"{shown!r} is not a regular file (a folder, FIFO or device); not read.",
                                field="path")
        if info.st_size > max_bytes:
            return None, info.st_size
        return handle.read(max_bytes + 1)[:max_bytes], info.st_size


def write_regular(root: Path, parts: tuple[str, ...], content: bytes, *,
                  owner: tuple[int, int] | None = None) -> bool:
    """Create or replace root/parts with `content` (parents made as needed); True if it existed.

    A file with a second hard link is refused: the other name could be outside the
    worktree, and truncating it would change that file too.
    """
    shown = "/".join(parts)
    with folder(root, parts[:-1], create=True, owner=owner) as dir_fd:
        try:
            os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            existed = True
        except FileNotFoundError:
            existed = False
        try:
            fd = os.open(parts[-1], _WRITE_FLAGS, 0o644, dir_fd=dir_fd)
        except IsADirectoryError:
            raise NotInWorktree(f"{shown!r} is a folder.", field="path") from None
        except OSError as exc:  # ELOOP: the file is a link; ENXIO: a FIFO nobody reads
            raise _refusal(shown, exc) from None
    with os.fdopen(fd, "wb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotInWorktree(f"{shown!r} is not a regular file (a FIFO or device); not written.", field="path")
        if info.st_nlink > 1:
            raise NotInWorktree(f"{shown!r} has another hard link, possibly outside the worktree; not written. "
                                "Delete it first if you mean to replace it.", field="path")
        os.ftruncate(fd, 0)
        handle.write(content)
        if owner is not None:
            os.fchown(fd, *owner)
    return existed
