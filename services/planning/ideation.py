"""Ideation (SPEC §12.4): a session of seven questions about one source — a clean result, a
belief, a literature item or a project — the owner's answers, and idea cards, proposed by
Claude from the answers or written by the owner.

A session is read as "I<number>". Its deck is written when it starts, with the source's title
and the nearest literature item and belief of that moment filled in, so the answers stay
beside the questions they answered. Answers and cards are rough work and stay here; only a
card the owner promotes enters the record, as one of four things:

- an experiment in `proposed` (experiment —derives_from→ session, and a note on its timeline);
- a belief update proposal, waiting for the owner like an agent's (services.research.beliefs);
- a literature task: a todo (todo —derives_from→ session);
- a question in a clean result's discussion.

A card promotes once: its row is locked, and a second press answers what the first made.
Queuing, plan approval and launching still need the owner, on the experiment's own page.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import AgentRun, CleanResultVersion, Experiment, db
from models.ideation import IdeaCard, IdeationSession
from models.literature import LiteratureItem
from models.research import Belief
from services.core import input_shape, records, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, NotFound, ValidationError
from services.core.redact import redact
from services.core.sanitize import check_markdown_nesting, render_markdown
from services.day import todos
from services.planning import discussion
from services.research import beliefs, links, literature
from services.workflow import experiments, orchestration, runs

NUMBER_COUNTER = "ideation_number"
LABEL_PREFIX = "I"
AGENT = "ideation"
SCOPE = "ideation"
QUESTION_COUNT = 7
ANSWER_MAX = 10_000
CARD_TITLE_MAX = 300
CARD_BODY_MAX = 10_000
CARDS_MAX = 100  # a session's cards, Claude's and the owner's together
SOURCE_NOUNS = {"clean_result": "clean result", "belief": "belief", "literature": "literature item",
                "project": "project"}
PROMOTION_NOUNS = {"experiment": "an experiment", "belief_update": "a belief update",
                   "literature_task": "a literature task", "result_question": "a clean-result question"}


def label(number: int) -> str:
    """A session as people cite it: "I4"."""
    return f"{LABEL_PREFIX}{number}"


def render_body(text: str | None) -> str:
    """A card's body (or an answer) as sanitized HTML."""
    return render_markdown(text or "")


# --- the deck --------------------------------------------------------------------------

def deck(title: str, nearest_literature: str | None, nearest_belief: str | None) -> list[str]:
    """The seven questions of SPEC §12.4 about a source called `title`; the fifth and sixth
    name the nearest literature item and belief, or ask for one when there is none."""
    return [
        f"What assumption behind \"{title}\" would fail first?",
        f"What variable in \"{title}\" has never been ablated?",
        "What would a skeptical collaborator ask before trusting this?",
        "What cheap experiment would make this source less ambiguous?",
        f"What would change if \"{nearest_literature}\" is right?" if nearest_literature
        else f"Which recent paper would most threaten \"{title}\"?",
        f"How should \"{nearest_belief}\" change if this source is replicated?" if nearest_belief
        else "What belief would this source most strongly update?",
        "What clean result would be worth writing if this line of work succeeds?",
    ]


@dataclass(frozen=True)
class Source:
    """What a session starts from: its record, title, the text its nearest items are looked
    up by, and its project."""
    kind: str
    record: object
    title: str
    text: str
    project_id: uuid.UUID | None


def _result_title(experiment: Experiment) -> str:
    title = db.session.scalar(sa.select(CleanResultVersion.title)
                              .where(CleanResultVersion.experiment_id == experiment.id)
                              .order_by(CleanResultVersion.created_at.desc()).limit(1))
    return title or experiment.title


# A clean result's title ends with its confidence; those words say nothing about its subject.
_CONFIDENCE_SUFFIX = re.compile(r"\s*\((?:LOW|MODERATE|HIGH) confidence\)\s*$", re.IGNORECASE)


def source_of(kind, record_id) -> Source:
    """The source a form names by kind and id; a clear error for an unknown kind or a missing record."""
    if kind not in registry.IDEATION_SOURCE_KINDS:
        raise ValidationError("An ideation session starts from a clean result, a belief, a literature item or a "
                              "project.", field="source_kind")
    record = links.load(kind, record_id)
    if kind == "clean_result":
        title = _result_title(record)
        return Source(kind, record, title, f"{_CONFIDENCE_SUFFIX.sub('', title)} {record.question or ''}",
                      record.project_id)
    if kind == "belief":
        return Source(kind, record, record.title, f"{record.title} {record.current_belief}", record.project_id)
    if kind == "literature":
        return Source(kind, record, record.title, f"{record.title} {record.abstract}", record.project_id)
    return Source(kind, record, record.title, f"{record.title} {record.question}", record.id)


# --- sessions --------------------------------------------------------------------------

def next_number() -> int:
    return records.next_number(NUMBER_COUNTER, IdeationSession.number)


def start_session(kind, record_id, actor: Actor) -> IdeationSession:
    """A new session on the source, its deck written now; the caller commits."""
    source = source_of(kind, record_id)
    nearest_item = literature.nearest(source.text, exclude_id=source.record.id if kind == "literature" else None)
    nearest_belief = beliefs.nearest(source.text, exclude_id=source.record.id if kind == "belief" else None)
    title = " ".join(source.title.split())[:CARD_TITLE_MAX]
    session = IdeationSession(
        id=uuid.uuid4(), number=next_number(), source_kind=kind, source_id=source.record.id, title=title,
        deck=deck(title, nearest_item.title if nearest_item else None,
                  nearest_belief.title if nearest_belief else None),
        answers={}, nearest_literature_id=nearest_item.id if nearest_item else None,
        nearest_belief_id=nearest_belief.id if nearest_belief else None, project_id=source.project_id)
    db.session.add(session)
    db.session.flush()
    return session


def find_session(ref) -> IdeationSession | None:
    text = str(ref).strip() if ref is not None else ""
    if text[:1] in ("I", "i"):
        text = text[1:]
    if text.isdigit() and len(text) <= 9:
        return db.session.scalar(sa.select(IdeationSession).where(IdeationSession.number == int(text)))
    try:
        return db.session.get(IdeationSession, uuid.UUID(text))
    except ValueError:
        return None


def get_session(ref) -> IdeationSession:
    session = find_session(ref)
    if session is None:
        raise NotFound(f"No ideation session {str(ref)[:40]}. Sessions are named I<number>, e.g. I3.")
    return session


def session_list(limit: int = 200) -> list[IdeationSession]:
    """Sessions, newest first."""
    return list(db.session.scalars(sa.select(IdeationSession).order_by(IdeationSession.number.desc()).limit(limit)))


def card_counts(sessions) -> dict:
    """Session id → (open cards, promoted cards), in one query."""
    ids = [s.id for s in sessions]
    if not ids:
        return {}
    rows = db.session.execute(sa.select(IdeaCard.session_id, IdeaCard.status, sa.func.count())
                              .where(IdeaCard.session_id.in_(ids)).group_by(IdeaCard.session_id, IdeaCard.status))
    counts: dict = {}
    for session_id, status, count in rows:
        open_count, promoted = counts.get(session_id, (0, 0))
        counts[session_id] = (open_count + (count if status == "open" else 0),
                              promoted + (count if status == "promoted" else 0))
    return counts


def source_link(session: IdeationSession) -> links.RecordRef | None:
    """The session's source as a label and a page, or None when it is gone."""
    try:
        return links.describe(session.source_kind, links.load(session.source_kind, session.source_id))
    except NotFound:
        return None


def nearest_records(session: IdeationSession) -> tuple[LiteratureItem | None, Belief | None]:
    item = db.session.get(LiteratureItem, session.nearest_literature_id) if session.nearest_literature_id else None
    belief = db.session.get(Belief, session.nearest_belief_id) if session.nearest_belief_id else None
    return item, belief


def sessions_of(kind: str, record_id) -> list[IdeationSession]:
    """The sessions started from one record, newest first (its page lists them beside "Ideate")."""
    return list(db.session.scalars(sa.select(IdeationSession).where(
        IdeationSession.source_kind == kind, IdeationSession.source_id == record_id)
        .order_by(IdeationSession.number.desc()).limit(20)))


# --- answers ---------------------------------------------------------------------------

def _clean_answer(position: str, value) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"The answer to question {position} must be text.", field=f"answer_{position}")
    text = value.replace("\r\n", "\n").strip()
    if len(text) > ANSWER_MAX:
        raise ValidationError(f"The answer to question {position} is {len(text):,} characters; the limit is "
                              f"{ANSWER_MAX:,}. Nothing was saved.", field=f"answer_{position}")
    if text:
        check_markdown_nesting(text)
    return text


def save_answers(session: IdeationSession, answers: dict) -> bool:
    """Save the answers given (question position "1"…"7" → text; an empty text clears one);
    all or nothing: one bad answer saves none. True when something changed."""
    if not isinstance(answers, dict):
        raise ValidationError("Answers come as question number → text.", field="answers")
    cleaned = {}
    for position, value in answers.items():
        key = str(position)
        if not key.isdigit() or not 1 <= int(key) <= QUESTION_COUNT:
            raise ValidationError(f"There is no question {key[:10]}; the deck has {QUESTION_COUNT}.",
                                  field="answers")
        cleaned[key] = _clean_answer(key, value)
    merged = {**(session.answers or {}), **cleaned}
    merged = {key: text for key, text in merged.items() if text}
    if merged == (session.answers or {}):
        return False
    session.answers = merged  # a new dict, so the JSON column is written
    session.updated_at = utcnow()
    return True


def answered(session: IdeationSession) -> list[tuple[int, str, str]]:
    """(position, question, answer) for every question, answered or not."""
    answers = session.answers or {}
    return [(n, question, answers.get(str(n), "")) for n, question in enumerate(session.deck, start=1)]


# --- cards -----------------------------------------------------------------------------

def cards(session: IdeationSession) -> list[IdeaCard]:
    """The session's cards: open ones first, then promoted, then discarded; oldest first within each."""
    order = sa.case({status: rank for rank, status in enumerate(registry.IDEA_CARD_STATUSES)}, value=IdeaCard.status)
    return list(db.session.scalars(sa.select(IdeaCard).where(IdeaCard.session_id == session.id)
                                   .order_by(order, IdeaCard.created_at, IdeaCard.id)))


def _card_title(value) -> str:
    if not isinstance(value, str) or not input_shape.has_visible_text(value):
        raise ValidationError(f"Give the idea a title (1–{CARD_TITLE_MAX} characters).", field="title")
    title = " ".join(value.split())
    if len(title) > CARD_TITLE_MAX:
        raise ValidationError(f"The title is {len(title)} characters; the limit is {CARD_TITLE_MAX}.", field="title")
    return redact(title)


def _card_body(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError("The idea's text must be text.", field="body_md")
    text = value.replace("\r\n", "\n").strip()
    if len(text) > CARD_BODY_MAX:
        raise ValidationError(f"The idea's text is {len(text):,} characters; the limit is {CARD_BODY_MAX:,}.",
                              field="body_md")
    check_markdown_nesting(text)
    return redact(text)


def add_card(session: IdeationSession, title, body, *, origin: str = "owner", run: AgentRun | None = None) -> IdeaCard:
    """A new open card (the owner's, or Claude's from `run`); the caller commits."""
    title, body = _card_title(title), _card_body(body)
    count = db.session.scalar(sa.select(sa.func.count()).select_from(IdeaCard)
                              .where(IdeaCard.session_id == session.id))
    if count >= CARDS_MAX:
        raise Conflict(f"{label(session.number)} has {CARDS_MAX} cards already; discard some or start another "
                       "session.", code="too_many_cards")
    card = IdeaCard(id=uuid.uuid4(), session_id=session.id, origin=origin, title=title, body_md=body, status="open",
                    agent_run_id=run.id if run else None, promoted_label="", promoted_url="")
    db.session.add(card)
    db.session.flush()
    return card


def get_card(session: IdeationSession, card_id) -> IdeaCard:
    card = records.get_by_id(IdeaCard, card_id, "No such idea card (it may belong to another session).")
    if card.session_id != session.id:
        raise NotFound("No such idea card (it may belong to another session).")
    return card


def discard(card: IdeaCard) -> bool:
    """Set an open card aside; False when it already was. A promoted card stays promoted."""
    db.session.refresh(card, with_for_update=True)
    if card.status == "promoted":
        raise Conflict(f"This card became {card.promoted_label} already; it stays promoted.", code="card_promoted")
    if card.status == "discarded":
        return False
    card.status = "discarded"
    return True


def restore(card: IdeaCard) -> bool:
    """Bring a discarded card back to open."""
    db.session.refresh(card, with_for_update=True)
    if card.status != "discarded":
        return False
    card.status = "open"
    return True


# --- Claude's proposals ----------------------------------------------------------------

def latest_run(session: IdeationSession) -> AgentRun | None:
    return db.session.scalars(sa.select(AgentRun).where(AgentRun.scope_kind == SCOPE,
                                                        AgentRun.scope_id == session.id)
                              .order_by(AgentRun.created_at.desc())).first()


def is_proposing(run: AgentRun | None) -> bool:
    return run is not None and run.status in registry.RUN_ACTIVE_STATUSES


def start_proposals(session: IdeationSession) -> AgentRun:
    """A queued run of the ideation agent on the session; the caller commits, then enqueues it
    (services.workflow.jobs.enqueue_run). Refused without a model key, without any answer, or
    while one runs."""
    if not session.answers:
        raise ValidationError("Answer at least one question first: Claude proposes ideas from your answers.",
                              field="answers")
    if not orchestration.agents_enabled():
        raise ValidationError("No ANTHROPIC_API_KEY is configured, so Claude cannot propose ideas. "
                              "Write your own cards below.")
    if is_proposing(latest_run(session)):
        raise Conflict("Claude is already proposing ideas for this session.", code="already_proposing")
    request = (f"Propose idea cards for ideation session {label(session.number)} on "
               f"{SOURCE_NOUNS[session.source_kind]} “{session.title}”: read the session (the deck and the owner's "
               "answers), then propose the cards.")
    return runs.create_run(kind="apply", agent=AGENT, request=request, scope_id=session.id, scope_kind=SCOPE)


def scoped_session(run: AgentRun) -> IdeationSession:
    """The session an ideation run was started on."""
    if run.scope_kind != SCOPE or run.scope_id is None:
        raise ValidationError("This run is not about an ideation session.")
    return get_session(run.scope_id)


# --- promotion -------------------------------------------------------------------------

@dataclass(frozen=True)
class Promoted:
    card: IdeaCard
    created: bool  # False: the card was promoted before, and this answers what it became

    @property
    def message(self) -> str:
        if self.created:
            return f"Promoted to {self.card.promoted_label}."
        return f"This card was promoted already: it became {self.card.promoted_label}."


def _session_ref(session: IdeationSession) -> links.RecordRef:
    return links.describe("ideation", session)


def _from_line(session: IdeationSession) -> str:
    return f"From ideation session {label(session.number)} on “{session.title}”."


def _card_text(card: IdeaCard) -> str:
    return f"{card.title}\n\n{card.body_md}".strip()


def _to_experiment(session: IdeationSession, card: IdeaCard, actor: Actor, ref: str, question=None):
    fields = {"title": card.title}
    if card.body_md:
        fields["hypothesis"] = card.body_md
    if session.project_id:
        fields["project_id"] = str(session.project_id)
    experiment = experiments.create_experiment(fields, actor, note=f"Proposed from an idea card. {_from_line(session)}")
    links.create_link(links.describe("experiment", experiment), "derives_from", _session_ref(session), actor,
                      note="Proposed from an idea card of this session.")
    return experiment.id, f"#{experiment.number} {experiment.title}", f"/experiments/{experiment.number}"


def _belief_for(session: IdeationSession, ref: str) -> Belief:
    if ref.strip():
        return beliefs.get_belief(ref.strip())
    if session.source_kind == "belief":
        belief = db.session.get(Belief, session.source_id)
        if belief is not None:
            return belief
    if session.nearest_belief_id:
        belief = db.session.get(Belief, session.nearest_belief_id)
        if belief is not None:
            return belief
    raise ValidationError("Name the belief this idea would update (B3).", field="target_ref")


def _to_belief_update(session: IdeationSession, card: IdeaCard, actor: Actor, ref: str, question=None):
    belief = _belief_for(session, ref)
    if belief.status in ("retracted", "archived"):
        raise Conflict(f"{beliefs.label(belief.number)} is {belief.status}; no update is proposed to it.",
                       code="belief_closed")
    # The belief's own text and standing, unchanged: the card is the reasoning, and the owner
    # writes the new text when accepting (edit, then accept) or rejects it.
    proposal = beliefs.propose_update(belief, None, None, status=belief.status, confidence=belief.confidence,
                                      text=belief.current_belief or belief.title,
                                      evidence=_from_line(session), reasoning=_card_text(card))
    return (proposal.id, f"an update proposed to {beliefs.label(belief.number)} {belief.title}",
            f"/beliefs/{belief.number}#proposals")


def _to_literature_task(session: IdeationSession, card: IdeaCard, actor: Actor, ref: str, question=None):
    title = f"Literature: {card.title}"
    data = {"title": title if len(title) <= todos.TITLE_MAX else card.title,
            "body_md": f"{card.body_md}\n\n{_from_line(session)}".strip(), "intent": "exploratory"}
    if session.project_id:
        data["project"] = str(session.project_id)
    todo = todos.create_todo(data, actor)
    links.create_link(links.describe("todo", todo), "derives_from", _session_ref(session), actor,
                      note="A literature task from an idea card of this session.")
    return todo.id, f"{todos.label(todo.number)} {todo.title}", f"/todos/{todo.number}"


def _result_for(session: IdeationSession, ref: str) -> Experiment:
    if ref.strip():
        digits = ref.strip().lstrip("#Rr").strip()
        if not digits.isdigit() or len(digits) > 9:
            raise ValidationError("Name a clean result as R12 (experiment 12's).", field="target_ref")
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == int(digits)))
        if experiment is None:
            raise NotFound(f"No experiment #{digits}.")
        if not experiment.has_clean_result:
            raise ValidationError(f"#{digits} has no clean result yet.", field="target_ref")
        return experiment
    if session.source_kind == "clean_result":
        experiment = db.session.get(Experiment, session.source_id)
        if experiment is not None and experiment.has_clean_result:
            return experiment
    raise ValidationError("Name the clean result the question is for (R12).", field="target_ref")


def _question_text(session: IdeationSession, card: IdeaCard) -> str:
    return f"{_card_text(card)}\n\n{_from_line(session)}"


def _to_result_question(session: IdeationSession, card: IdeaCard, actor: Actor, ref: str, question=None):
    experiment = _result_for(session, ref)
    posted = discussion.post_comment("experiment", experiment, question or _question_text(session, card), actor)
    return (posted.comment.id, f"a question on the result of #{experiment.number}",
            f"/experiments/{experiment.number}#discussion")


PROMOTERS = {"experiment": _to_experiment, "belief_update": _to_belief_update,
             "literature_task": _to_literature_task, "result_question": _to_result_question}


def promote(session: IdeationSession, card: IdeaCard, target, actor: Actor, ref="") -> Promoted:
    """Make the card `target` (experiment, belief_update, literature_task, result_question);
    `ref` names the belief (B3) or the clean result (R12) when the session's own is not meant.
    Once: a second press (or a retried call) answers what the first one made."""
    if target not in registry.IDEA_PROMOTION_TARGETS:
        raise ValidationError("Promote a card to an experiment, a belief update, a literature task or a "
                              "clean-result question.", field="target")
    if not isinstance(ref, str) or len(ref) > 80:
        raise ValidationError("Name the record in a few characters (B3, R12).", field="target_ref")
    # A question's comment is rendered first: rendering ends a transaction that has only read
    # (services.core.unlocked), which would let the card's row lock go.
    question = discussion.prepare_body(_question_text(session, card)) \
        if target == "result_question" and card.status == "open" else None
    # Two presses that arrive together take turns on the card's row; the second finds it promoted.
    db.session.refresh(card, with_for_update=True)
    if card.status == "promoted":
        return Promoted(card, False)
    if card.status == "discarded":
        raise Conflict("This card was discarded; restore it before promoting it.", code="card_discarded")
    record_id, record_label, url = PROMOTERS[target](session, card, actor, ref, question)
    card.status, card.promoted_kind, card.promoted_id = "promoted", target, record_id
    card.promoted_label, card.promoted_url, card.promoted_at = record_label[:400], url[:400], utcnow()
    return Promoted(card, True)


# --- typed links -----------------------------------------------------------------------

def _find_by_label(text: str) -> IdeationSession | None:
    stripped = text.strip()
    if len(stripped) < 2 or stripped[0] not in "Ii" or not stripped[1:].isdigit():
        return None
    return find_session(stripped)


links.register("ideation", links.Resolver(
    "ideation session", lambda session_id: db.session.get(IdeationSession, session_id),
    lambda s: f"{label(s.number)} Ideation on “{s.title}”", lambda s: f"/ideas/{s.number}", find_session,
    model=IdeationSession))
links.register_shorthand("ideation", _find_by_label)
