"""RQ entry points for the owner's day (the weekly review's "Draft now" button and API)."""
from __future__ import annotations


def draft_weekly_review(week_end: str) -> str:
    """Draft the review of the week ending `week_end`; nothing new when it is drafted already."""
    from services.day import weekly_review
    return weekly_review.draft_job(week_end)
