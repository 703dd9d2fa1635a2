"""Discussion threads on experiment and run pages (SPEC §8.8) and on literature items (§11.3).

Comments are markdown, rendered and sanitized when written (`body_html`). A comment that
mentions @claude starts a `qa` run of the comment-responder; the question remembers the
run (`qa_run_id`), so the reply lands in the thread the question was asked in, labelled
as Claude's. Replies that read like leaked instructions are refused (services.agents.tools).
A question on a literature item goes to the literature-responder instead, in a run scoped to
the item (as the literature agent's are), so it can read the item and its project's beliefs.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

import sqlalchemy as sa

from models import AgentRun, Comment, Experiment, LiteratureItem, db
from services.claude import loader
from services.core import events, input_shape, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, Forbidden, ValidationError
from services.core.records import get_by_id
from services.core.redact import redact
from services.core.sanitize import render_markdown
from services.core.unlocked import outside_transaction
from services.research import literature
from services.workflow import experiments, orchestration, runs

ENTITY_KINDS = ("experiment", "run", "literature")
COMMENT_MAX = 20_000
RESPONDER = "comment-responder"
LITERATURE_RESPONDER = "literature-responder"
# What of a literature item the question's brief quotes; the responder reads the rest
# (summary, reasons, notes in full) with read_literature.
ITEM_TEXT_QUOTED = 2_000
MENTION = re.compile(r"(?<![\w@])@claude\b", re.I)
NO_KEY_NOTICE = ("Claude was not asked: no ANTHROPIC_API_KEY is configured, so agents are off. "
                 "Your comment is saved.")


@dataclass
class Thread:
    entity_kind: str
    entity_id: uuid.UUID
    comments: list[Comment] = field(default_factory=list)
    pending_runs: list[AgentRun] = field(default_factory=list)
    # An @claude question whose run ended without a reply, by the question's id: shown as
    # failed, with a retry, instead of vanishing.
    failed_runs: dict = field(default_factory=dict)

    @property
    def waiting_for_claude(self) -> bool:
        return bool(self.pending_runs)


@dataclass
class Posted:
    comment: Comment
    run: AgentRun | None = None
    notice: str | None = None


def thread(entity_kind: str, entity_id) -> Thread:
    """A thread's comments, oldest first, and the Claude runs still answering in it."""
    comments = list(db.session.scalars(sa.select(Comment).where(
        Comment.entity_kind == entity_kind, Comment.entity_id == entity_id)
        .order_by(Comment.created_at, Comment.id)))
    run_ids = [c.qa_run_id for c in comments if c.qa_run_id]
    asked = {run.id: run for run in db.session.scalars(sa.select(AgentRun).where(AgentRun.id.in_(run_ids)))} \
        if run_ids else {}
    pending = [run for run in asked.values() if run.status not in registry.RUN_TERMINAL_STATUSES]
    replied = {c.agent_run_id for c in comments if c.agent_run_id}
    failed = {c.id: asked[c.qa_run_id] for c in comments
              if c.qa_run_id in asked and asked[c.qa_run_id].status in registry.RUN_TERMINAL_STATUSES
              and asked[c.qa_run_id].status != "completed" and c.qa_run_id not in replied}
    return Thread(entity_kind, entity_id, comments, pending, failed)


def clean_body(body) -> str:
    if not isinstance(body, str) or not input_shape.has_visible_text(body):
        raise ValidationError("Write something first: the comment is empty (it has no visible character).",
                              field="body")
    body = body.strip()
    if len(body) > COMMENT_MAX:
        raise ValidationError(f"The comment is {len(body):,} characters; the limit is {COMMENT_MAX:,}.",
                              field="body")
    return redact(body)


@dataclass(frozen=True)
class PreparedComment:
    """A comment's checked, redacted text and its rendered HTML: no database needed."""

    body: str
    html: str


def prepare_body(body) -> PreparedComment:
    """Check, redact and render a comment, with no transaction open (services.core.unlocked: on
    SQLite an open one holds the write lock while the markdown renders)."""
    if isinstance(body, PreparedComment):
        return body
    return outside_transaction(_prepare_body, body)


def _prepare_body(body) -> PreparedComment:
    body = clean_body(body)
    return PreparedComment(body, render_markdown(body))


def experiment_of(entity_kind: str, entity) -> Experiment | None:
    if entity_kind == "experiment":
        return entity
    if entity_kind == "run" and entity.scope_kind == "experiment" and entity.scope_id:
        return db.session.get(Experiment, entity.scope_id)
    return None


def _where(entity_kind: str, entity) -> str:
    if entity_kind == "experiment":
        return f"experiment #{entity.number} ({entity.title})"
    if entity_kind == "literature":
        return f"literature item {entity.id} (“{entity.title[:300]}”)"
    return f"run {entity.short_id} ({entity.kind}, agent {entity.agent}, status {entity.status})"


def _item_brief(item: LiteratureItem) -> str:
    """What the question is about, quoted into the responder's brief: the metadata, and the
    start of the abstract, summary and notes (read_literature has them whole)."""
    lines = [f"Title: {item.title}", f"Authors: {', '.join(item.authors[:20]) or 'unknown'}",
             f"Year: {item.year or 'unknown'}", f"Type: {item.type}"]
    lines += [f"{label}: {value}" for label, value in (("Venue", item.venue), ("arXiv", item.arxiv_id),
                                                      ("DOI", item.doi), ("URL", item.url)) if value]
    for label, text in (("Abstract", item.abstract), ("Summary", item.summary_md), ("Owner's notes", item.notes)):
        if text:
            cut = text[:ITEM_TEXT_QUOTED] + (" …(cut; read_literature has all of it)"
                                             if len(text) > ITEM_TEXT_QUOTED else "")
            lines.append(f"{label}:\n{cut}")
    return "\n".join(lines)


def post_comment(entity_kind: str, entity, body, actor: Actor) -> Posted:
    """The owner's (or an invited member's) comment; @claude asks the comment-responder,
    for the owner only — a member never starts an agent run, which spends (SPEC §13). The
    caller commits, then enqueues `posted.run` (if any)."""
    if entity_kind not in ENTITY_KINDS:
        raise ValidationError("Comments go on experiments, runs and literature items.", field="entity_kind")
    prepared = prepare_body(body)
    body = prepared.body
    by_member = actor.kind == "member"
    comment = Comment(id=uuid.uuid4(), entity_kind=entity_kind, entity_id=entity.id,
                      author_kind="member" if by_member else "owner",
                      author_name=(actor.label or "Owner")[:120], body_md=body, body_html=prepared.html)
    db.session.add(comment)
    experiment = experiment_of(entity_kind, entity)
    if experiment is not None:
        events.record(experiment, "comment", actor, note=body[:300],
                      metadata={"comment_id": str(comment.id), "on": entity_kind,
                                **({"run_id": str(entity.id)} if entity_kind == "run" else {})})
    posted = Posted(comment)
    if MENTION.search(body) and not by_member:
        posted.run, posted.notice = _ask_claude(entity_kind, entity, experiment, comment)
    return posted


def _ask_claude(entity_kind: str, entity, experiment: Experiment | None, comment: Comment):
    if not orchestration.agents_enabled():
        if experiment is not None:
            events.record(experiment, "note", Actor.system(), note=NO_KEY_NOTICE)
        return None, NO_KEY_NOTICE
    earlier = thread(entity_kind, entity.id).comments[-10:]
    context = "\n\n".join(f"{c.author_name} wrote:\n{c.body_md[:2000]}" for c in earlier if c.id != comment.id)
    request = (f"The owner asked you a question in the discussion of {_where(entity_kind, entity)}.\n\n"
               + (f"Earlier in the thread:\n\n{context}\n\n" if context else "")
               + f"The question:\n\n{comment.body_md}\n\nAnswer it with add_comment.")
    if entity_kind == "run" and entity.last_error:
        request += f"\n\nThat run's last error: {entity.last_error[:2000]}"
    if entity_kind == "literature":
        request += (f"\n\nThe item (id {entity.id}):\n\n{_item_brief(entity)}\n\nread_literature it for its summary, "
                    "reasons and notes in full, and list_beliefs for what its project believes now.")
        definition = loader.get(LITERATURE_RESPONDER)
        run = runs.create_run(kind="qa", agent=LITERATURE_RESPONDER, request=request, scope_id=entity.id,
                              scope_kind="literature", model=loader.model_for(definition))
        comment.qa_run_id = run.id
        return run, None
    definition = loader.get(RESPONDER)
    run = runs.create_run(kind="qa", agent=RESPONDER, request=request,
                          scope_id=experiment.id if experiment is not None else None,
                          model=loader.model_for(definition))
    comment.qa_run_id = run.id
    if experiment is not None:
        events.record(experiment, "note", Actor.system(), note=f"Claude was asked (run {run.short_id}).",
                      metadata={"run_id": str(run.id), "comment_id": str(comment.id)})
    return run, None


def retry_question(comment: Comment, actor: Actor) -> Posted:
    """Ask Claude again for an @claude question whose run failed. The caller commits, then
    enqueues `posted.run`."""
    entity = entity_for(comment)
    if thread(comment.entity_kind, comment.entity_id).failed_runs.get(comment.id) is None:
        raise Conflict("Claude's reply to that comment has not failed; nothing to retry.", code="nothing_to_retry")
    posted = Posted(comment)
    posted.run, posted.notice = _ask_claude(comment.entity_kind, entity, experiment_of(comment.entity_kind, entity),
                                            comment)
    return posted


def get_comment(comment_id) -> Comment:
    return get_by_id(Comment, comment_id, "That comment no longer exists.")


def edit_comment(comment: Comment, body, actor: Actor) -> Comment:
    """The owner edits one of their own comments (Claude's stay as written)."""
    if comment.author_kind != "owner" or actor.kind != "owner":
        raise Forbidden("You can edit only your own comments.", code="not_your_comment")
    prepared = prepare_body(body)
    if prepared.body != comment.body_md:
        comment.body_md = prepared.body
        comment.body_html = prepared.html
        comment.edited_at = utcnow()
    return comment


def delete_comment(comment: Comment, actor: Actor) -> None:
    """The owner deletes a comment (theirs or Claude's)."""
    if actor.kind != "owner":
        raise Forbidden("Only the owner can delete comments.", code="owner_session_required")
    db.session.delete(comment)


def entity_for(comment: Comment):
    """The experiment, run or literature item a comment belongs to."""
    if comment.entity_kind == "experiment":
        return experiments.get_experiment(comment.entity_id)
    if comment.entity_kind == "literature":
        return literature.get_item(comment.entity_id)
    return runs.get_run(comment.entity_id)


def post_agent_reply(run: AgentRun, body: str, experiment: Experiment | None) -> Comment:
    """Claude's reply, in the thread whose question started `run` (else the experiment's);
    checked and redacted like any comment. `body` may be prepared (prepare_body) before the
    caller's transaction opened."""
    prepared = prepare_body(body)
    body = prepared.body
    asked_by = [run.id] + ([run.parent_run_id] if run.parent_run_id else [])
    question = db.session.scalar(sa.select(Comment).where(Comment.qa_run_id.in_(asked_by))
                                 .order_by(Comment.created_at.desc()).limit(1))
    if question is not None:
        entity_kind, entity_id = question.entity_kind, question.entity_id
    elif experiment is not None:
        entity_kind, entity_id = "experiment", experiment.id
    else:
        raise ValidationError("This run has no discussion to answer in.")
    comment = Comment(id=uuid.uuid4(), entity_kind=entity_kind, entity_id=entity_id, author_kind="agent",
                      author_name="Claude", body_md=body, body_html=prepared.html, agent_run_id=run.id)
    db.session.add(comment)
    if experiment is not None:
        events.record(experiment, "comment", Actor("agent", str(run.id), run.agent), note=body[:300],
                      metadata={"by": "Claude", "comment_id": str(comment.id), "on": entity_kind})
    return comment
