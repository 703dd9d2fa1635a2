"""Clarifying questions and the owner's answers (SPEC §4.3)."""
from __future__ import annotations

import functools
import re

import sqlalchemy as sa

from models import Experiment, WorkflowEvent, db
from services.core.actors import Actor
from services.core.errors import Conflict, ValidationError
from services.core.redact import redact
from services.workflow import lifecycle, markers

_KEY = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
MAX_QUESTIONS = 20
QUESTION_MAX = 2_000
ANSWER_MAX = 10_000
REDISPATCH_NOTE = "Owner re-dispatched the planner from awaiting_clarifications."


def clean_questions(raw) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise ValidationError("questions must be a non-empty list of {key, text}.", field="questions")
    if len(raw) > MAX_QUESTIONS:
        raise ValidationError(f"At most {MAX_QUESTIONS} questions at once.", field="questions")
    cleaned, keys = [], set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValidationError(f"questions[{i}] must be an object with key and text.", field="questions")
        key, text = item.get("key"), item.get("text")
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValidationError(f"questions[{i}].key must be a short kebab-case key like "
                                  "\"baseline-model\".", field="questions")
        if key in keys:
            raise ValidationError(f"questions[{i}].key {key!r} is used twice.", field="questions")
        if not isinstance(text, str) or not text.strip() or len(text) > QUESTION_MAX:
            raise ValidationError(f"questions[{i}].text must be 1–{QUESTION_MAX} characters.", field="questions")
        keys.add(key)
        cleaned.append({"key": key, "text": redact(text.strip())})
    return cleaned


def ask(experiment: Experiment, raw_questions, actor: Actor) -> list[lifecycle.SideEffect]:
    """Store the planner's questions (`epm:clarify`) and wait for the owner. Caller commits."""
    questions = clean_questions(raw_questions)
    effects = lifecycle.transition(experiment, "awaiting_clarifications", actor,
                                   note=f"{len(questions)} clarifying question(s) for the owner.")
    markers.post_marker(experiment, "epm:clarify", actor, metadata={"questions": questions})
    return effects


def open_questions(experiment: Experiment) -> list[dict]:
    """The latest question set, if the experiment is waiting for answers."""
    if experiment.status != "awaiting_clarifications":
        return []
    event = db.session.scalar(
        sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id,
                                       WorkflowEvent.marker == "epm:clarify")
        .order_by(WorkflowEvent.created_at.desc()).limit(1))
    return ((event.metadata_ or {}).get("questions") or []) if event else []


@functools.cache
def _latest_question_sets() -> sa.Select:
    """Each listed experiment's latest question set (`ids`, bound when it runs): built once,
    as building it cost more than running it."""
    latest = sa.select(WorkflowEvent.entity_id, sa.func.max(WorkflowEvent.created_at).label("at")) \
        .where(WorkflowEvent.entity_id.in_(sa.bindparam("ids", expanding=True)), WorkflowEvent.marker == "epm:clarify") \
        .group_by(WorkflowEvent.entity_id).subquery()
    return sa.select(WorkflowEvent.entity_id, WorkflowEvent.metadata_) \
        .join(latest, sa.and_(latest.c.entity_id == WorkflowEvent.entity_id, latest.c.at == WorkflowEvent.created_at)) \
        .where(WorkflowEvent.marker == "epm:clarify")


def open_questions_of(waiting: list[Experiment]) -> dict:
    """Experiment id → its latest question set, for many experiments waiting for answers, in
    one query (Today's queue): `open_questions` for each, without a query each."""
    ids = [e.id for e in waiting if e.status == "awaiting_clarifications"]
    if not ids:
        return {}
    rows = db.session.execute(_latest_question_sets(), {"ids": ids}).all()
    return {entity_id: (metadata or {}).get("questions") or [] for entity_id, metadata in rows}


def clean_answers(answers: dict, allowed: set, *, unknown: str) -> dict:
    """Owner answers keyed by question or textbox: only `allowed` keys (else `unknown`, formatted
    with the key), text, capped, redacted; blanks dropped."""
    cleaned = {}
    for key, text in answers.items():
        if key not in allowed:
            raise ValidationError(unknown.format(key=key), field="answers")
        if not isinstance(text, str) or len(text) > ANSWER_MAX:
            raise ValidationError(f"The answer to {key!r} must be text of at most {ANSWER_MAX:,} characters.",
                                  field="answers")
        if text.strip():
            cleaned[key] = redact(text.strip())
    return cleaned


def answer(experiment: Experiment, answers, actor: Actor,
           expected_status: str | None = None) -> list[lifecycle.SideEffect]:
    """Store the owner's answers (`epm:clarify-answers`) and send the planner back to work."""
    questions = open_questions(experiment)
    if not questions:
        raise Conflict(f"#{experiment.number} is not waiting for answers (it is {experiment.status}).",
                       code="stale_status", current=experiment.status)
    if not isinstance(answers, dict):
        raise ValidationError("answers must map question keys to text.", field="answers")
    cleaned = clean_answers(answers, {q["key"] for q in questions}, unknown="There is no open question {key!r}.")
    if not cleaned:
        raise ValidationError("Answer at least one question.", field="answers")
    markers.post_marker(experiment, "epm:clarify-answers", actor, metadata={"answers": cleaned})
    return lifecycle.transition(experiment, "clarifying", actor, note=REDISPATCH_NOTE,
                                expected_status=expected_status, metadata={"answers": cleaned})


def answered_questions(experiment: Experiment) -> list[dict]:
    """Every round of questions the owner answered, oldest first: `{"at", "items": [{"text",
    "answer"}]}`, each answer beside the question it answers (one query, both markers)."""
    rows = db.session.scalars(
        sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id,
                                       WorkflowEvent.marker.in_(("epm:clarify", "epm:clarify-answers")))
        .order_by(WorkflowEvent.created_at, WorkflowEvent.id))
    rounds, asked = [], []
    for event in rows:
        metadata = event.metadata_ or {}
        if event.marker == "epm:clarify":
            asked = metadata.get("questions") or []
            continue
        answers = metadata.get("answers") or {}
        items = [{"text": q["text"], "answer": answers[q["key"]]} for q in asked if q.get("key") in answers]
        if items:
            rounds.append({"at": event.created_at, "items": items})
    return rounds
