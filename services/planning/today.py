"""Today (SPEC §12.1): the owner's home page as data — one ranked queue of what needs the
owner, what is running, yesterday's log, what is next, and what was spent.

"Needs you" is built from a registry of sources (`register`): each source gathers its waiting
items in a fixed number of queries and, if the owner can act on them from Today, carries out
the action through the same service (and so the same guards) as the item's own page. Other
kinds of waiting items (a weekly review to publish, an ideation deck) join by registering a
source; the page, the poll's version and the action route need no change.

The queue's order: a deferred item last, then by priority (urgent first), then by how long it
has waited (oldest first), then by cost (dearest first: more is at stake).

Lives in `planning` because the queue's actions are planning's (approvals, questions) and
research's (belief updates); the day package sits below planning and cannot reach them.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.orm import aliased

from models import AgentRun, ApprovalRequest, Experiment, PlanVersion, Pod, User, db
from models.day import DailyLogEntry, Todo, WeeklyReview, WeeklyReviewVersion
from models.ideation import IdeaCard, IdeationSession
from models.notification import NotificationEmail
from models.literature import LiteratureItem
from models.research import Belief, BeliefProposal
from models.result import Comment
from services.core import lean_reads, records, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import NotFound, ValidationError
from services.day import daily_log
from services.dispatch import spend
from services.planning import approvals, board_moves, discussion, questions
from services.research import beliefs
from services.workflow import lifecycle

RUNNING_LIMIT = 30
NEXT_LIMIT = 10
IDEAS_SHOWN = 3  # Claude's open idea cards in "Next": a nudge, not a second list (the rest wait on /ideas)
QUEUE_LIMIT = 200
# Experiments Sagan is working on (its "run and verify" turn): the Running section.
RUNNING_STATUSES = tuple(s.name for s in registry.STATUSES if s.turn == registry.TURN_RUN)
# Owner-turn statuses that have a source of their own below; the rest are "waiting" items
# whose action is on the experiment's page (a gate, a review, a promotion).
_OWN_SOURCE_STATUSES = {"plan_pending", "awaiting_approval", "awaiting_clarifications", "blocked"}
WAITING_STATUSES = tuple(sorted(registry.OWNER_TURN_STATUSES - _OWN_SOURCE_STATUSES))


# --- the queue's items and sources -------------------------------------------------------

@dataclass(frozen=True)
class Need:
    """One thing waiting on the owner, as the queue shows it."""
    kind: str                 # its source's kind ("plan", "belief_update", …)
    key: str                  # which one, within its kind: what the action URL carries
    label: str                # "#12", "B3"
    title: str
    why: str                  # what the owner is asked
    url: str                  # the item's own page
    priority: str
    waiting_since: datetime
    cost_usd: float | None = None
    deferred: bool = False
    detail: dict = field(default_factory=dict)  # what the row's form needs (the questions, a blocker plan…)

    @property
    def sort_key(self) -> tuple:
        return (self.deferred, -registry.PRIORITY_RANK.get(self.priority, 1), self.waiting_since,
                -(self.cost_usd or 0.0))


@dataclass(frozen=True)
class Acted:
    """What an action did, in a sentence for the row, and the side effects to run after the commit."""
    message: str
    effects: list = field(default_factory=list)


@dataclass(frozen=True)
class NeedSource:
    """A kind of waiting item: how to gather them and, when Today can act on them, how."""
    kind: str
    gather: Callable[[], list[Need]]
    actions: tuple[str, ...] = ()
    act: Callable[[str, str, dict, Actor], Acted] | None = None


SOURCES: dict[str, NeedSource] = {}


def register(source: NeedSource) -> NeedSource:
    """Add (or replace) a source of the "Needs you" queue."""
    SOURCES[source.kind] = source
    return source


def needs_you() -> list[Need]:
    """Everything waiting on the owner, ranked (module docstring), at most QUEUE_LIMIT."""
    items = [item for source in SOURCES.values() for item in source.gather()]
    return sorted(items, key=lambda item: item.sort_key)[:QUEUE_LIMIT]


def act(kind: str, key: str, action: str, form: dict, actor: Actor) -> Acted:
    """Carry out `action` on one waiting item; the caller commits and runs `effects`.

    An unknown kind or item is a NotFound, an action the kind does not have a
    ValidationError; an item that moved meanwhile gets its own service's refusal (a Conflict
    saying what it is now), so nothing is changed twice."""
    source = SOURCES.get(kind)
    if source is None or source.act is None:
        raise NotFound(f"Today has no action for {str(kind)[:40]!r} items.")
    if action not in source.actions:
        raise ValidationError(f"Choose one of: {', '.join(source.actions)}.", field="action")
    return source.act(key, action, form, actor)


def _experiment_by_number(key: str) -> Experiment:
    try:
        number = int(key)
    except (TypeError, ValueError):
        number = None
    experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number)) \
        if number is not None and 0 < number < 2**31 else None
    if experiment is None:
        raise NotFound(f"There is no experiment #{str(key)[:20]} any more.")
    return experiment


# What a queue row shows of an experiment: read as columns, not as whole rows (the page
# reads a hundred of them; loading each full experiment was most of the queue's time).
_SHOWN = (Experiment.id, Experiment.number, Experiment.title, Experiment.priority, Experiment.status,
          Experiment.status_before_block, sa.func.coalesce(Experiment.last_event_at, Experiment.created_at).label("waited"))


# The page's statements are built once and kept (functools.cache), as the poll's is: building
# a select with its joins and aliases cost more Python than PostgreSQL takes to run it, and
# the page runs about twenty. Each is a constant; what varies is bound when it runs.

@functools.cache
def _experiments_in(statuses: tuple[str, ...]) -> sa.Select:
    return sa.select(*_SHOWN).where(Experiment.status.in_(statuses))


def _experiments_in_status(*statuses: str) -> list:
    return db.session.execute(_experiments_in(statuses)).all()


def _note(form: dict) -> str:
    note = form.get("note") or ""
    if not isinstance(note, str) or len(note) > 2_000:
        raise ValidationError("The note must be text of at most 2,000 characters.", field="note")
    return note.strip()


# Plans to approve ------------------------------------------------------------------------

@functools.cache
def _plans_query() -> sa.Select:
    return (sa.select(ApprovalRequest, Experiment.number, Experiment.title, Experiment.priority, PlanVersion.estimate,
                      PlanVersion.plan_json["is_blocker"].as_boolean())
            .join(Experiment, Experiment.id == ApprovalRequest.experiment_id)
            .outerjoin(PlanVersion, PlanVersion.id == ApprovalRequest.plan_version_id)
            .where(ApprovalRequest.status == "pending"))


def _gather_plans() -> list[Need]:
    rows = db.session.execute(_plans_query()).all()
    items = []
    for approval, number, title, priority, estimate, is_blocker in rows:
        cost = (estimate or {}).get("total_usd") if isinstance(estimate, dict) else None
        cost = cost if cost is not None else approval.estimated_cost_usd
        unticked = sum(1 for checked in (approval.checklist or {}).values() if not checked)
        items.append(Need(
            "plan", str(approval.id), f"#{number}", title,
            "Acknowledge the blocker" if is_blocker else "Approve, defer or reject the plan",
            f"/approvals/{approval.id}", priority, approval.created_at,
            float(cost) if cost is not None else None, approval.deferred_at is not None,
            {"blocker": bool(is_blocker), "unticked": unticked, "defer_note": approval.defer_note}))
    return items


def _act_plan(key: str, action: str, form: dict, actor: Actor) -> Acted:
    approval = approvals.get_request(key)
    number = db.session.scalar(sa.select(Experiment.number).where(Experiment.id == approval.experiment_id))
    note = _note(form)
    effects = approvals.resolve(approval, action, actor, note=note or None,
                                confirm_unchecked=form.get("confirm_unchecked") == "1")
    said = {"approve": f"Approved: #{number} goes on to implementing.",
            "defer": f"Deferred: #{number}'s plan waits, lower in the queue.",
            "reject": f"Rejected: #{number} goes back to planning with your note."}[action]
    return Acted(said, effects or [])


register(NeedSource("plan", _gather_plans, ("approve", "defer", "reject"), _act_plan))


# Belief updates Claude proposed ----------------------------------------------------------

@functools.cache
def _belief_updates_query() -> sa.Select:
    return (sa.select(BeliefProposal, Belief.number, Belief.title, Belief.status, Belief.version, Experiment.number,
                      Experiment.priority)
            .join(Belief, Belief.id == BeliefProposal.belief_id)
            .outerjoin(Experiment, Experiment.id == BeliefProposal.experiment_id)
            .where(BeliefProposal.status == "pending"))


def _gather_belief_updates() -> list[Need]:
    rows = db.session.execute(_belief_updates_query()).all()
    return [Need("belief_update", str(proposal.id), beliefs.label(number), title,
                 f"Claude proposes {status} → {proposal.proposed_status} ({proposal.proposed_confidence})"
                 + (f", from #{experiment_number}" if experiment_number else ""),
                 f"/beliefs/{number}#proposal-{proposal.id}", priority or "normal", proposal.created_at,
                 detail={"stale": version != proposal.based_on_version, "text": proposal.proposed_text})
            for proposal, number, title, status, version, experiment_number, priority in rows]


def _act_belief_update(key: str, action: str, form: dict, actor: Actor) -> Acted:
    proposal = records.get_by_id(BeliefProposal, key, "That belief update no longer exists.")
    belief = db.session.get(Belief, proposal.belief_id)
    if action == "accept":
        beliefs.accept_proposal(belief, proposal, actor)
        return Acted(f"Accepted: {beliefs.label(belief.number)} is now {belief.status} (version {belief.version}).")
    beliefs.reject_proposal(belief, proposal, actor, _note(form))
    return Acted(f"Rejected: {beliefs.label(belief.number)} stays as it was.")


register(NeedSource("belief_update", _gather_belief_updates, ("accept", "reject"), _act_belief_update))


# Questions the planner asked -------------------------------------------------------------

def _gather_questions() -> list[Need]:
    waiting = _experiments_in_status("awaiting_clarifications")
    asked = questions.open_questions_of(waiting)
    return [Need("question", str(e.number), f"#{e.number}", e.title,
                 f"Answer {len(asked.get(e.id, []))} question(s) from the planner",
                 f"/experiments/{e.number}#questions", e.priority, e.waited,
                 detail={"questions": asked.get(e.id, [])})
            for e in waiting]


def _act_question(key: str, action: str, form: dict, actor: Actor) -> Acted:
    experiment = _experiment_by_number(key)
    answers = {name[len("answer-"):]: value for name, value in form.items() if name.startswith("answer-")}
    effects = questions.answer(experiment, answers, actor, expected_status="awaiting_clarifications")
    return Acted(f"Answered: the planner takes #{experiment.number} up again.", effects)


register(NeedSource("question", _gather_questions, ("answer",), _act_question))


def _proposer():
    """The name a member's proposal is shown under (joined on `users`)."""
    return sa.func.coalesce(sa.func.nullif(User.display_name, ""), User.email).label("proposer")


# Experiments Claude or a collaborator proposed ----------------------------------------------

@functools.cache
def _proposed_query() -> sa.Select:
    return (sa.select(*_SHOWN, _proposer()).outerjoin(User, User.id == Experiment.proposed_by_member_id)
            .where(Experiment.status == "proposed", Experiment.parent_experiment_id.is_(None),
                   sa.or_(Experiment.proposed_by_agent.is_(True), Experiment.proposed_by_member_id.is_not(None))))


def _gather_proposed() -> list[Need]:
    """Claude's proposals and members' (as theirs, by name), in one query."""
    rows = db.session.execute(_proposed_query()).all()
    return [Need("proposed", str(e.number), f"#{e.number}", e.title,
                 f"{e.proposer or 'Claude'} proposed this experiment: start or dismiss",
                 f"/experiments/{e.number}", e.priority, e.waited) for e in rows]


def _act_proposed(key: str, action: str, form: dict, actor: Actor) -> Acted:
    experiment = _experiment_by_number(key)
    if action == "start":
        effects = board_moves.move(experiment, "planning", actor, expected_status="proposed")
        return Acted(f"Started: #{experiment.number} goes to planning.", effects)
    note = _note(form) or "Dismissed from Today."
    effects = lifecycle.transition(experiment, "archived", actor, note=note, expected_status="proposed")
    return Acted(f"Dismissed: #{experiment.number} is archived.", effects)


register(NeedSource("proposed", _gather_proposed, ("start", "dismiss"), _act_proposed))


# Blocked experiments ---------------------------------------------------------------------

def _gather_blocked() -> list[Need]:
    rows = _experiments_in_status("blocked")
    return [Need("blocked", str(e.number), f"#{e.number}", e.title,
                 f"Blocked (was {registry.STATUS_BY_NAME[e.status_before_block].label})"
                 if e.status_before_block in registry.STATUS_BY_NAME else "Blocked",
                 f"/experiments/{e.number}", e.priority, e.waited,
                 detail={"back_to": e.status_before_block}) for e in rows]


def _act_blocked(key: str, action: str, form: dict, actor: Actor) -> Acted:
    experiment = _experiment_by_number(key)
    lifecycle.check_expected(experiment, "blocked")
    back_to = experiment.status_before_block
    if not back_to:
        raise ValidationError(f"#{experiment.number} has no status to go back to; choose one on its page.",
                              field="action")
    note = _note(form) or "Unblocked from Today."
    effects = lifecycle.transition(experiment, back_to, actor, note=note, expected_status="blocked")
    return Acted(f"Unblocked: #{experiment.number} is back at {registry.STATUS_BY_NAME[back_to].label}.", effects)


register(NeedSource("blocked", _gather_blocked, ("unblock",), _act_blocked))


# Other owner turns (a gate, a review, a promotion): acted on from the experiment's page ----

def _gather_waiting() -> list[Need]:
    rows = _experiments_in_status(*WAITING_STATUSES)
    return [Need("waiting", str(e.number), f"#{e.number}", e.title,
                 registry.turn_for(e.status).removeprefix("Owner turn: ").capitalize(),
                 f"/experiments/{e.number}", e.priority, e.waited) for e in rows]


register(NeedSource("waiting", _gather_waiting))


# Claude's replies that failed -------------------------------------------------------------

@functools.cache
def _failed_replies_query() -> sa.Select:
    reply = aliased(Comment)
    replied = sa.select(reply.id).where(reply.agent_run_id == AgentRun.id).exists()
    return (sa.select(Comment.id, Comment.entity_kind, Comment.entity_id, Comment.created_at, AgentRun.status,
                      Experiment.number, Experiment.title, Experiment.priority)
            .join(AgentRun, AgentRun.id == Comment.qa_run_id)
            .outerjoin(Experiment, sa.and_(Comment.entity_kind == "experiment", Experiment.id == Comment.entity_id))
            .where(AgentRun.status.in_(sorted(registry.RUN_TERMINAL_STATUSES - {"completed"})), ~replied))


def _gather_failed_replies() -> list[Need]:
    """@claude questions whose run ended without a reply (discussion.thread's rule, for all
    threads at once): retried from the thread itself."""
    rows = db.session.execute(_failed_replies_query()).all()
    items = []
    for comment_id, entity_kind, entity_id, created_at, status, number, title, priority in rows:
        if entity_kind == "experiment":
            label, name, url = f"#{number}", title, f"/experiments/{number}#comment-{comment_id}"
        elif entity_kind == "run":
            label, name, url = "run", "A question on a run", f"/runs/{entity_id}#comment-{comment_id}"
        else:
            label, name, url = "paper", "A question on a paper", f"/library/{entity_id}#comment-{comment_id}"
        items.append(Need("failed_reply", str(comment_id), label, name, f"Claude's reply {status}: ask again",
                          url, priority or "normal", created_at))
    return items


def _act_failed_reply(key: str, action: str, form: dict, actor: Actor) -> Acted:
    """Ask Claude again, as the thread's own retry does (discussion.retry_question refuses a
    question whose reply has not failed, so a second tap asks nothing)."""
    posted = discussion.retry_question(discussion.get_comment(key), actor)
    if posted.run is None:
        return Acted(posted.notice or "Claude was not asked.")
    return Acted("Asked again: Claude's reply will appear in the thread.",
                 [lifecycle.SideEffect("enqueue_run", None, actor, {"run_id": str(posted.run.id)})])


register(NeedSource("failed_reply", _gather_failed_replies, ("retry",), _act_failed_reply))


# Todos and papers a collaborator suggested, not yet looked at: opened from their own pages --

SUGGESTIONS_SHOWN = 10


@functools.cache
def _suggested_todos_query() -> sa.Select:
    return (sa.select(Todo.number, Todo.title, Todo.priority, Todo.created_at, _proposer())
            .join(User, User.id == Todo.proposed_by_member_id)
            .where(Todo.status == "inbox").order_by(Todo.created_at).limit(SUGGESTIONS_SHOWN))


def _gather_suggested_todos() -> list[Need]:
    rows = db.session.execute(_suggested_todos_query()).all()
    return [Need("suggested_todo", str(row.number), f"T{row.number}", row.title,
                 f"{row.proposer} suggested this todo: scope it or close it", f"/todos/{row.number}",
                 row.priority, row.created_at) for row in rows]


@functools.cache
def _suggested_papers_query() -> sa.Select:
    return (sa.select(LiteratureItem.id, LiteratureItem.title, LiteratureItem.created_at, _proposer())
            .join(User, User.id == LiteratureItem.proposed_by_member_id)
            .where(LiteratureItem.read_state == "unread").order_by(LiteratureItem.created_at)
            .limit(SUGGESTIONS_SHOWN))


def _gather_suggested_papers() -> list[Need]:
    rows = db.session.execute(_suggested_papers_query()).all()
    return [Need("suggested_paper", str(row.id), "Paper", row.title,
                 f"{row.proposer} added this paper to the project's library: read it or merge it",
                 f"/library/{row.id}", "normal", row.created_at) for row in rows]


register(NeedSource("suggested_todo", _gather_suggested_todos))
register(NeedSource("suggested_paper", _gather_suggested_papers))


# Weekly reviews drafted and not yet published: read, edit and publish on the review's page --

REVIEWS_SHOWN = 4  # the newest unpublished weeks; older ones wait on /reviews


@functools.cache
def _reviews_query() -> sa.Select:
    published = sa.select(WeeklyReviewVersion.id).where(WeeklyReviewVersion.review_id == WeeklyReview.id,
                                                        WeeklyReviewVersion.status == "published").exists()
    return (sa.select(WeeklyReview.week_end, WeeklyReview.drafted_at)
            .where(~published).order_by(WeeklyReview.week_end.desc()).limit(REVIEWS_SHOWN))


def _gather_reviews() -> list[Need]:
    rows = db.session.execute(_reviews_query()).all()
    return [Need("weekly_review", week_end.isoformat(), "Review", f"The week ending {week_end:%a %d %b %Y}",
                 "Drafted: read it, edit it and publish it for your mentor", f"/reviews/{week_end.isoformat()}",
                 "normal", drafted_at) for week_end, drafted_at in rows]


register(NeedSource("weekly_review", _gather_reviews))


# Emails that could not be sent after their last try: Settings says why and can try again --

FAILED_EMAILS_SHOWN = 5


@functools.cache
def _failed_emails_query() -> sa.Select:
    return (sa.select(NotificationEmail.id, NotificationEmail.subject, NotificationEmail.last_error,
                      NotificationEmail.updated_at)
            .where(NotificationEmail.status == "failed")
            .order_by(NotificationEmail.updated_at.desc()).limit(FAILED_EMAILS_SHOWN))


def _gather_failed_emails() -> list[Need]:
    rows = db.session.execute(_failed_emails_query()).all()
    return [Need("failed_email", str(email_id), "Email", subject,
                 f"Could not be sent: {(error or 'the server did not take it')[:160]}", "/settings#email",
                 "normal", failed_at) for email_id, subject, error, failed_at in rows]


register(NeedSource("failed_email", _gather_failed_emails))


# --- the other sections --------------------------------------------------------------------

@dataclass(frozen=True)
class RunningExperiment:
    experiment: tuple             # its shown columns (_SHOWN): number, title, status…
    progress: tuple | None        # (pct, message) of its live pods: the least advanced pod's pct
    pods: list                    # its live pods
    burn_usd_per_hour: float


@dataclass(frozen=True)
class Running:
    experiments: list[RunningExperiment]
    total: int
    burn_usd_per_hour: float      # every live pod's rate, not only the listed experiments'


@functools.cache
def _running_queries() -> tuple[sa.Select, sa.Select]:
    """The running experiments shown; how many there are and every running pod's rate."""
    shown = (sa.select(*_SHOWN).where(Experiment.status.in_(RUNNING_STATUSES))
             .order_by(sa.func.coalesce(Experiment.last_event_at, Experiment.created_at).desc()).limit(RUNNING_LIMIT))
    rate = sa.func.coalesce(Pod.adjusted_cost_per_hr, Pod.cost_per_hr, 0)
    totals = sa.select(
        sa.select(sa.func.count()).select_from(Experiment)
        .where(Experiment.status.in_(RUNNING_STATUSES)).correlate(None).scalar_subquery(),
        sa.select(sa.func.coalesce(sa.func.sum(rate), 0)).where(Pod.status == "running").correlate(None)
        .scalar_subquery())
    return shown, totals


def running() -> Running:
    """Experiments Sagan works on, the most recently moved first, with their live pods and
    what those cost an hour (three queries whatever the number)."""
    shown_query, totals_query = _running_queries()
    shown = db.session.execute(shown_query).all()
    total, burn = db.session.execute(totals_query).one()
    pods_of: dict = {}
    if shown:
        for pod in db.session.scalars(sa.select(Pod).where(records.among(Pod.experiment_id, [e.id for e in shown]),
                                                           Pod.status.in_(registry.POD_LIVE_STATUSES))
                                      .order_by(Pod.created_at)):
            pods_of.setdefault(pod.experiment_id, []).append(pod)
    listed = []
    for e in shown:
        pods = pods_of.get(e.id, [])
        # As the board's cards: the least advanced pod's progress, the first message.
        reported = [p.progress_pct for p in pods if p.progress_pct is not None]
        message = next((p.progress_message for p in pods if p.progress_message), None)
        progress = (min(reported), message) if reported else None
        listed.append(RunningExperiment(e, progress, pods, sum(float(p.adjusted_cost_per_hr or p.cost_per_hr or 0)
                                                                for p in pods if p.status == "running")))
    return Running(listed, int(total or 0), float(burn or 0))


def yesterday() -> tuple:
    """(yesterday's date in the owner's time zone, its daily log entry or None)."""
    day = daily_log.today() - timedelta(days=1)
    return day, daily_log.get_entry(day)


@dataclass(frozen=True)
class IdeaNudge:
    """One of Claude's open idea cards, as "Next" lists it: the card and its session."""
    card_id: str
    title: str
    session_number: int
    session_title: str
    proposed_at: datetime
    more_in_session: int          # the session's other open Claude cards, not listed


@dataclass(frozen=True)
class Next:
    todos: list[Todo]
    follow_ups: list[Experiment]
    belief_tests: list[Belief]
    ideas: list[IdeaNudge] = field(default_factory=list)
    ideas_total: int = 0          # every open Claude-proposed card, the listed ones included


@functools.cache
def _claude_ideas_query(limit: int) -> sa.Select:
    claude_open = sa.and_(IdeaCard.origin == "claude", IdeaCard.status == "open")
    ranked = (sa.select(IdeaCard.id, IdeaCard.title, IdeaCard.created_at, IdeaCard.session_id,
                        sa.func.row_number().over(partition_by=IdeaCard.session_id,
                                                  order_by=(IdeaCard.created_at.desc(), IdeaCard.id)).label("nth"),
                        sa.func.count().over(partition_by=IdeaCard.session_id).label("in_session"),
                        sa.func.count().over().label("total"))
              .where(claude_open).subquery())
    return (sa.select(ranked.c.id, ranked.c.title, ranked.c.created_at, ranked.c.in_session, ranked.c.total,
                      IdeationSession.number, IdeationSession.title)
            .join(IdeationSession, IdeationSession.id == ranked.c.session_id)
            .where(ranked.c.nth == 1).order_by(ranked.c.created_at.desc(), ranked.c.id).limit(limit))


def claude_ideas(limit: int = IDEAS_SHOWN) -> tuple[list[IdeaNudge], int]:
    """Claude's newest open idea cards, at most one per session so one long deck does not
    crowd out the rest, and how many such cards there are in all: one query."""
    rows = db.session.execute(_claude_ideas_query(limit)).all()
    ideas = [IdeaNudge(str(card_id), title, number, session_title, created_at, int(in_session) - 1)
             for card_id, title, created_at, in_session, _total, number, session_title in rows]
    return ideas, int(rows[0].total) if rows else 0


@functools.cache
def _next_queries() -> tuple[sa.Select, sa.Select, sa.Select]:
    """Open todos, proposed follow-ups, active beliefs with a next test."""
    priority_first = sa.case({p: rank for rank, p in enumerate(reversed(registry.PRIORITIES))}, value=Todo.priority)
    return (sa.select(Todo).where(Todo.status.not_in(sorted(registry.TODO_CLOSED_STATUSES)),
                                  Todo.experiment_id.is_(None))
            .order_by(priority_first, Todo.number.desc()).limit(NEXT_LIMIT),
            sa.select(Experiment).where(Experiment.status == "proposed", Experiment.parent_experiment_id.is_not(None))
            .order_by(Experiment.number.desc()).limit(NEXT_LIMIT),
            sa.select(Belief).where(Belief.status == "active", Belief.next_test != "")
            .order_by(Belief.updated_at.desc()).limit(NEXT_LIMIT))


def next_up() -> Next:
    """Open todos (most urgent first), proposed follow-ups, the next tests of active beliefs
    and Claude's newest open idea cards."""
    todos_query, follow_ups_query, tests_query = _next_queries()
    todos = list(db.session.scalars(todos_query))
    follow_ups = list(db.session.scalars(follow_ups_query))
    tests = list(db.session.scalars(tests_query))
    ideas, ideas_total = claude_ideas()
    return Next(todos, follow_ups, tests, ideas, ideas_total)


@dataclass(frozen=True)
class Spend:
    today: spend.WindowSpend
    week: spend.WindowSpend
    month: spend.WindowSpend


def spend_so_far(now: datetime | None = None) -> Spend:
    """Today, this week (from Monday) and this month, in the owner's time zone, agents and GPU
    apart: two queries for the three."""
    now = now or utcnow()
    day = daily_log.today(now)
    starts = [daily_log.bounds(first)[0] for first in (day, day - timedelta(days=day.weekday()), day.replace(day=1))]
    return Spend(*spend.spend_windows(starts, now, now))


# --- the poll's version ----------------------------------------------------------------------

# Every table a section reads. A row added or edited moves the table's newest `updated_at`
# (a pod's progress post stamps its row too: services/dispatch/progress.py); each of these
# tables but pods has an index on it (models.newest_change_index), so the newest is one probe
# of an index, whatever the table's size. The library (tens of thousands of rows) is not
# watched: a member's suggested paper stamps their `users` row instead
# (literature.suggest_for_member).
_WATCHED = (Experiment, ApprovalRequest, BeliefProposal, Belief, Todo, Pod, AgentRun, DailyLogEntry, Comment,
            WeeklyReview, WeeklyReviewVersion, NotificationEmail, IdeaCard, User)
_EMPTY, _COLON, _BAR = (sa.literal_column(f"'{text}'", sa.String) for text in ("", ":", "|"))


def _literals(names) -> list:
    """Names written into the statement (the poll's statement is compiled once to plain SQL:
    an IN list of parameters would not be); the registry's own names, nothing from outside."""
    return [sa.literal_column(f"'{name}'", sa.String) for name in sorted(names)]


def _counted() -> dict:
    """The rows counted beside a table's newest change, where a count is needed: a removed
    row moves no stamp, so the two kinds of row Today shows that can be removed are counted
    (an @claude question, whose failed reply waits in the queue, deleted from its thread; a
    failed email dismissed), each on an index over the few rows of that kind. Unfinished
    experiments are counted too, on their status index: one made by a transaction that
    commits after a later change still moves the count. (For the other tables such a
    milliseconds-wide race leaves the row to show at the next change; a whole-table count
    of each was most of the poll's database time.)"""
    return {Experiment: Experiment.status.in_(_literals(registry.NON_TERMINAL_STATUSES)),
            Comment: Comment.qa_run_id.is_not(None),
            NotificationEmail: NotificationEmail.status == sa.literal_column("'failed'", sa.String)}


def _watched_among() -> dict:
    """Tables watched among some of their rows only, newest change and count both. Pods: the
    unfinished ones, on their status index. A pod's row is the most written in Sagan (every
    progress post), and an index on its `updated_at` would cost each post an entry in every
    index of the table (PostgreSQL rewrites a row in place only while no indexed column
    changes). Today shows the live pods; one that starts, ends or restarts moves the count,
    and Spend's finished pods were last changed as they ended."""
    return {Pod: Pod.status.in_(_literals(registry.POD_ACTIVE_STATUSES))}


def _as_text(value) -> sa.ColumnElement:
    return sa.func.coalesce(sa.cast(value, sa.String), _EMPTY)


def _fingerprint() -> sa.ColumnElement:
    """Each watched table's newest change (and, for the few of `_counted` and
    `_watched_among`, a count), as one text made by the database: one value for the driver
    to convert, not fourteen."""
    counted, among = _counted(), _watched_among()
    parts = []
    for model in _WATCHED:
        newest = sa.select(sa.func.max(model.updated_at))
        if model in among:
            newest, counted[model] = newest.where(among[model]), among[model]
        part = _as_text(newest.correlate(None).scalar_subquery())
        if model in counted:
            count = sa.select(sa.func.count()).select_from(model).where(counted[model])
            part = part + _COLON + _as_text(count.correlate(None).scalar_subquery())
        parts.append(part)
    text = parts[0]
    for other in parts[1:]:
        text = text + _BAR + other
    return text


@functools.cache
def _version_query():
    """The fingerprint's statement, built once (building it costs more Python than it takes
    PostgreSQL to run it)."""
    return sa.select(_fingerprint())


@functools.cache
def _live_poll_query():
    """The poll's one statement: the fingerprint and, beside it, the session version of the
    user the session cookie names (front/quiet_polls.py checks it as load_user would). Only the
    owner's session: a member's cookie finds no version, so their poll goes on to Flask, whose
    access rule answers it (services/core/permissions.py)."""
    session_version = sa.select(User.session_version) \
        .where(User.id == sa.bindparam("user_id"), User.role == "owner").correlate(None).scalar_subquery()
    return sa.select(session_version, _fingerprint())


def _version_of(fingerprint: str, now: datetime | None) -> str:
    """The version: the owner's date (Yesterday turns over at midnight) and the fingerprint's digest."""
    digest = hashlib.blake2b((fingerprint or "").encode(), digest_size=12).hexdigest()
    return f"{daily_log.today(now).isoformat()}-{digest}"


def version(now: datetime | None = None) -> str:
    """A fingerprint of everything Today shows, in one query (on the poll connection, where
    the statement is prepared: through the request's session PostgreSQL planned its thirty
    subqueries afresh on every render)."""
    return _version_of(lean_reads.first_row(_version_query(), {})[0], now)


@dataclass(frozen=True)
class LivePoll:
    version: str
    session_version: int | None  # of the user asked for (None: no such user)


def live_poll(user_id) -> LivePoll:
    """Today's version and the session user's session version in one round trip, on the
    poll connection (services/core/lean_reads.py): read afresh on every call."""
    session_version, fingerprint = lean_reads.first_row(_live_poll_query(), {"user_id": user_id})
    return LivePoll(_version_of(fingerprint, None), session_version)
