"""The one clock. Code reads the time here so tests can move it instead of sleeping."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

_lock = threading.Lock()
_offset = timedelta(0)
_frozen: datetime | None = None


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, shifted by whatever a test set."""
    with _lock:
        if _frozen is not None:
            return _frozen
        return datetime.now(timezone.utc) + _offset


def advance(delta: timedelta) -> None:
    """Move the clock forward (tests only)."""
    global _offset, _frozen
    with _lock:
        if _frozen is not None:
            _frozen = _frozen + delta
        else:
            _offset = _offset + delta


def freeze(at: datetime | None = None) -> None:
    """Stop the clock at `at` (default: now) until reset() (tests only)."""
    global _frozen
    moment = at or datetime.now(timezone.utc)
    with _lock:
        _frozen = moment


def reset() -> None:
    """Back to real time."""
    global _offset, _frozen
    with _lock:
        _offset = timedelta(0)
        _frozen = None
