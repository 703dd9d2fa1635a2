"""RQ entry point for owner notifications (retried by RQ on failure)."""
from __future__ import annotations

from services.workflow import email_notify, notify


def deliver(experiment_id: str) -> int:
    """Post the owner-turn webhook for one experiment."""
    return notify.deliver(experiment_id)


def send_email(email_id: str) -> str:
    """Send one queued notification email (retried with back-off by RQ)."""
    return email_notify.deliver(email_id)
