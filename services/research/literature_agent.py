"""Starting the literature agent (agents/literature.md) on one item: it writes the item's
summary and relevance and threat reasons against the project's beliefs, and ranks the
unread queue. Its run is scoped to the item (`scope_kind` "literature"), one live run per
item at a time."""
from __future__ import annotations

import sqlalchemy as sa

from models import AgentRun, LiteratureItem, db
from services.core import registry
from services.core.errors import Conflict, ValidationError
from services.workflow import orchestration, runs

AGENT = "literature"
SCOPE = "literature"


def latest_run(item: LiteratureItem) -> AgentRun | None:
    """The newest literature-agent run on this item, if any."""
    return db.session.scalars(sa.select(AgentRun).where(AgentRun.scope_kind == SCOPE, AgentRun.scope_id == item.id)
                              .order_by(AgentRun.created_at.desc())).first()


def start_assessment(item: LiteratureItem) -> AgentRun:
    """A queued literature-agent run on `item`; the caller commits, then enqueues it
    (services.workflow.jobs.enqueue_run). Refused without a model key or while one runs."""
    if not orchestration.agents_enabled():
        raise ValidationError("No ANTHROPIC_API_KEY is configured, so Claude cannot read this item.")
    current = latest_run(item)
    if current is not None and current.status in registry.RUN_ACTIVE_STATUSES:
        raise Conflict("Claude is already reading this item.")
    request = (f"Assess literature item {item.id} (“{item.title[:300]}”) for the owner: read it, list the "
               "beliefs, write the assessment, then rank the unread queue.")
    return runs.create_run(kind="apply", agent=AGENT, request=request, scope_id=item.id, scope_kind=SCOPE)
