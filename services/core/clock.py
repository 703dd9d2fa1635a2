"""The one clock. Code reads the time here so tests can move it instead of sleeping."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

_lock = threading.Lock()
_offset = timedelta(0)


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, shifted by whatever a test set."""
    with _lock:
        return datetime.now(timezone.utc) + _offset


def advance(delta: timedelta) -> None:
    """Move the clock forward (tests only)."""
    global _offset
    with _lock:
        _offset = _offset + delta


def reset() -> None:
    """Back to real time."""
    global _offset
    with _lock:
        _offset = timedelta(0)
