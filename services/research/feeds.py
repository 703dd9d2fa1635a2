"""Literature feeds: an arXiv search query, an arXiv category, or an RSS/Atom URL, polled on
a schedule (workers/scheduler.py tick → `enqueue_due` → one job per feed). New entries land
`unread`; an entry already in the library merges. A poll reads and parses the whole answer
before writing anything, so a feed that is not a feed (or fails half-way) leaves only its
`last_error` behind, never half an import.
"""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import feedparser
import sqlalchemy as sa
from flask import current_app

from models import LiteratureFeed, db
from services.core import registry
from services.core.clock import utcnow
from services.core.errors import NotFound, SaganError, ValidationError
from services.core.outbound import check_outbound_url
from services.research import literature
from services.research.literature_sources import (LookupFailed, arxiv_entry_fields, fetch, normalize_arxiv_id,
                                                  normalize_doi, parse_arxiv_feed)
from services.workflow import jobs

ARXIV_CATEGORY = re.compile(r"[a-z-]+(?:\.[A-Za-z-]+)?")
MAX_ENTRIES = 200
POLL_JOB = "workers.literature.poll_feed"


def create_feed(form) -> LiteratureFeed:
    """A new feed after checking it (an RSS URL must be http(s) to a public host). The caller commits."""
    kind = form.get("kind") or ""
    if kind not in registry.LITERATURE_FEED_KINDS:
        raise ValidationError(f"Unknown feed kind “{kind[:40]}”; one of: {', '.join(registry.LITERATURE_FEED_KINDS)}.",
                              field="kind")
    query = " ".join((form.get("query") or "").split())
    if not query:
        raise ValidationError("Give the arXiv query, category or feed URL.", field="query")
    if len(query) > 2000:
        raise ValidationError("The query or URL is at most 2,000 characters.", field="query")
    if kind == "arxiv_category" and not ARXIV_CATEGORY.fullmatch(query):
        raise ValidationError("An arXiv category looks like cs.LG or stat.ML.", field="query")
    if kind == "rss":
        query = check_outbound_url(query, schemes=("https", "http"))
    label = " ".join((form.get("label") or "").split())[:200] or query[:200]
    feed = LiteratureFeed(kind=kind, query=query, label=label,
                          project_id=literature.project_id_of(form.get("project_id") or None))
    db.session.add(feed)
    db.session.flush()
    return feed


def get_feed(feed_id) -> LiteratureFeed:
    try:
        feed = db.session.get(LiteratureFeed, uuid.UUID(str(feed_id)))
    except ValueError:
        feed = None
    if feed is None:
        raise NotFound("No such feed.")
    return feed


def list_feeds() -> list[LiteratureFeed]:
    return list(db.session.scalars(sa.select(LiteratureFeed).order_by(LiteratureFeed.created_at)))


def delete_feed(feed: LiteratureFeed) -> None:
    """Stop polling a feed; the items it brought stay. The caller commits."""
    db.session.delete(feed)


def poll(feed: LiteratureFeed) -> int:
    """Read the feed and add its new entries; the number added. A failure is kept in
    `last_error` (and nothing is written); the caller commits either way."""
    feed.last_polled_at = utcnow()
    try:
        entries = read_entries(feed)
    except SaganError as exc:
        feed.last_error = exc.message
        return 0
    added = 0
    matcher = literature.Matcher()
    with db.session.begin_nested():
        for fields in entries:
            try:
                result = literature.add({**fields, "project_id": feed.project_id, "read_state": "unread"},
                                        source=fields.pop("source", "rss"), strict=False, feed_id=feed.id,
                                        matcher=matcher)
            except SaganError:
                continue  # an entry without a title: the others still land
            added += result.created
        db.session.flush()
    feed.last_error = ""
    feed.items_added += added
    return added


def read_entries(feed: LiteratureFeed) -> list[dict]:
    """The feed's entries as item fields; LookupFailed when it cannot be read or is not a feed."""
    if feed.kind == "rss":
        response = fetch(feed.query)
        if response.status_code != 200:
            raise LookupFailed(f"The feed answered HTTP {response.status_code}.")
        parsed = feedparser.parse(response.content)
        if not parsed.get("version") and not parsed.entries:
            raise LookupFailed("That URL is not an RSS or Atom feed" + (
                f" ({_reason(parsed.get('bozo_exception'))})." if parsed.get("bozo") else "."))
        return [fields for entry in parsed.entries[:MAX_ENTRIES] if (fields := rss_entry_fields(entry))]
    search = f"cat:{feed.query}" if feed.kind == "arxiv_category" else feed.query
    response = fetch(current_app.config["SAGAN_ARXIV_API_URL"],
                     params={"search_query": search, "sortBy": "submittedDate", "sortOrder": "descending",
                             "max_results": "50"})
    if response.status_code != 200:
        raise LookupFailed(f"arXiv answered HTTP {response.status_code}.")
    parsed = parse_arxiv_feed(response.content)
    return [arxiv_entry_fields(entry) for entry in parsed.entries[:MAX_ENTRIES]
            if normalize_arxiv_id((entry.get("id") or "").rsplit("/abs/", 1)[-1])]


def rss_entry_fields(entry) -> dict | None:
    """An RSS/Atom entry as item fields (a blog post unless it names an arXiv id or a DOI)."""
    title = " ".join((entry.get("title") or "").split())
    if not title:
        return None
    link = entry.get("link") or ""
    arxiv = re.search(r"arxiv\.org/(?:abs|pdf)/(\d{4}\.\d{4,5})", link)
    published = entry.get("published_parsed") or entry.get("updated_parsed")
    authors = [a.get("name", "") for a in entry.get("authors", []) if a.get("name")] or \
        ([entry["author"]] if entry.get("author") else [])
    summary = re.sub(r"<[^>]+>", " ", entry.get("summary") or "")
    return {"title": title, "authors": authors, "url": link[:2000], "year": published.tm_year if published else None,
            "abstract": " ".join(summary.split()), "arxiv_id": arxiv.group(1) if arxiv else None,
            "doi": normalize_doi(entry.get("prism_doi") or entry.get("dc_identifier")),
            "type": "paper" if arxiv else "blog_post", "source": "arxiv" if arxiv else "rss"}


def due_feeds() -> list[LiteratureFeed]:
    """Feeds not polled within SAGAN_LITERATURE_FEED_INTERVAL_MINUTES."""
    cutoff = utcnow() - timedelta(minutes=current_app.config["LITERATURE_FEED_INTERVAL_MINUTES"])
    return list(db.session.scalars(sa.select(LiteratureFeed).where(
        sa.or_(LiteratureFeed.last_polled_at.is_(None), LiteratureFeed.last_polled_at < cutoff))))


def enqueue_poll(feed_id) -> str:
    """One poll job per feed at a time (the job id is the lock)."""
    return jobs.enqueue_unique(jobs.DEFAULT, POLL_JOB, str(feed_id), job_id=f"literature-feed-{feed_id}")


def enqueue_due() -> int:
    """The scheduler's part: a poll job for every feed that is due."""
    due = due_feeds()
    for feed in due:
        enqueue_poll(feed.id)
    return len(due)


def poll_by_id(feed_id: str) -> int:
    """The job: poll one feed and commit (a feed deleted meanwhile is nothing to do)."""
    feed = db.session.get(LiteratureFeed, uuid.UUID(feed_id))
    if feed is None:
        return 0
    added = poll(feed)
    db.session.commit()
    return added


def _reason(exc) -> str:
    return " ".join(str(exc or "").split())[:160] or "unreadable"
