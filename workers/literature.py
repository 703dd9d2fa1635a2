"""RQ entry point for literature feeds (the scheduler enqueues one poll per due feed)."""
from __future__ import annotations


def poll_feed(feed_id: str) -> int:
    """Poll one literature feed; new entries land unread."""
    from services.research import feeds
    return feeds.poll_by_id(feed_id)
