"""RQ entry point for owner notifications (retried by RQ on failure)."""
from __future__ import annotations

from services.workflow import notify


def deliver(experiment_id: str) -> int:
    """Post the owner-turn webhook for one experiment."""
    return notify.deliver(experiment_id)
