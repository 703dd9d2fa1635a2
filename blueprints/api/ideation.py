"""Ideation (SPEC §12.4): list sessions, read one, start one from a source, save answers, add
a card, promote a card.

A session's `ref` is "I3", 3 or its uuid. Reading takes `read`; the rest `write`, the scope
creating an experiment takes, since promoting a card can create one. Promotion answers once:
asking again answers what the card already became (200, `created: false`), as the session
page's button does. Asking Claude for cards stays on the session page (it starts a paid run).
"""
from __future__ import annotations

import uuid

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, id_text, int_arg, iso
from models.ideation import IdeaCard, IdeationSession
from services.core import registry
from services.core.errors import ValidationError
from services.planning import ideation
from services.research import links

routes = Routes()


def _refuse_unknown(data: dict, known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(map(str, unknown))[:200]}.", field=str(unknown[0]))


def _require(data: dict, name: str, sentence: str):
    if name not in data:
        raise ValidationError(sentence, field=name)
    return data[name]


def _source_key(kind: str, source_id: str) -> str:
    """The source's uuid: given as one, or found by the label people cite (R12, B3, a
    project's slug) within its kind. An unknown kind is left for the service to refuse."""
    if kind not in registry.IDEATION_SOURCE_KINDS or _is_uuid(source_id):
        return source_id
    return str(links.parse_reference(f"{kind}:{source_id}").id)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def card_json(card: IdeaCard) -> dict:
    return {"id": str(card.id), "sessionId": str(card.session_id), "origin": card.origin, "title": card.title,
            "bodyMd": card.body_md, "status": card.status, "agentRunId": id_text(card.agent_run_id),
            "promotedKind": card.promoted_kind, "promotedId": id_text(card.promoted_id),
            "promotedLabel": card.promoted_label or None, "promotedUrl": card.promoted_url or None,
            "promotedAt": iso(card.promoted_at), "createdAt": iso(card.created_at)}


def session_json(session: IdeationSession, counts: tuple[int, int] = (0, 0), *, full: bool = False) -> dict:
    """A session as the list shows it; `full` adds its questions with their answers, its
    source and nearest records as labels, and its cards."""
    open_cards, promoted = counts
    answer = {"id": str(session.id), "number": session.number, "cite": ideation.label(session.number),
              "title": session.title, "sourceKind": session.source_kind, "sourceId": str(session.source_id),
              "projectId": id_text(session.project_id), "openCards": open_cards, "promotedCards": promoted,
              "answered": len(session.answers or {}), "url": f"/ideas/{session.number}",
              "createdAt": iso(session.created_at), "updatedAt": iso(session.updated_at)}
    if full:
        source = ideation.source_link(session)
        item, belief = ideation.nearest_records(session)
        answer |= {
            "source": {"label": source.label, "url": source.url} if source else None,
            "nearestLiteratureId": id_text(item.id if item else None),
            "nearestBeliefId": id_text(belief.id if belief else None),
            "questions": [{"position": n, "question": q, "answer": a} for n, q, a in ideation.answered(session)],
            "cards": [card_json(card) for card in ideation.cards(session)]}
    return answer


def _full(session: IdeationSession) -> dict:
    return session_json(session, ideation.card_counts([session]).get(session.id, (0, 0)), full=True)


@routes.get("/ideas")
@access.api("read")
def list_ideation_sessions():
    """Sessions newest first, with their open and promoted card counts; `limit` 1–200 (default 50)."""
    found = ideation.session_list(int_arg("limit", 50, 1, 200))
    counts = ideation.card_counts(found)
    return {"sessions": [session_json(s, counts.get(s.id, (0, 0))) for s in found]}


@routes.get("/ideas/<ref>")
@access.api("read")
def get_ideation_session(ref: str):
    """One session: its seven questions with the answers, its source, and its cards."""
    return {"session": _full(ideation.get_session(ref))}


@routes.post("/ideas")
@access.api("write")
def start_ideation_session():
    """Start a session from `sourceKind` (clean_result, belief, literature, project) and
    `sourceId` (the record's uuid, or the label people cite: R12, B3, a project's slug): 201
    with the session, its deck written now."""
    data = body_fields(("source_kind", "source_id"))
    _refuse_unknown(data, {"source_kind", "source_id"})
    kind = _require(data, "source_kind", "Name the source's kind: clean_result, belief, literature or project.")
    source_id = _require(data, "source_id", "Name the source record (its id, number or label).")
    if not isinstance(kind, str) or not isinstance(source_id, (str, int)) or isinstance(source_id, bool):
        raise ValidationError("sourceKind and sourceId are text (sourceId may be a number).", field="source_id")
    session = ideation.start_session(kind, _source_key(kind, str(source_id).strip()), access.actor())
    commit_then_run()
    return {"session": _full(session)}, 201


@routes.post("/ideas/<ref>/answers")
@access.api("write")
def save_ideation_answers(ref: str):
    """Save `answers`, question position ("1"–"7") → text (empty text clears one); all or
    nothing: one bad answer saves none. Answers whether anything changed."""
    data = body_fields(("answers",))
    _refuse_unknown(data, {"answers"})
    answers = _require(data, "answers", 'Send "answers": question number → text.')
    session = ideation.get_session(ref)
    changed = ideation.save_answers(session, answers)
    commit_then_run()
    return {"changed": changed, "session": _full(session)}


@routes.post("/ideas/<ref>/cards")
@access.api("write")
def add_idea_card(ref: str):
    """Add the caller's own open card: `title` (required), `bodyMd`; 201 with it."""
    data = body_fields(("title", "body_md"))
    _refuse_unknown(data, {"title", "body_md"})
    session = ideation.get_session(ref)
    card = ideation.add_card(session, data.get("title"), data.get("body_md"))
    commit_then_run()
    return {"card": card_json(card)}, 201


@routes.post("/ideas/<ref>/cards/<card_id>/promote")
@access.api("write")
def promote_idea_card(ref: str, card_id: str):
    """Promote a card to `target` (experiment, belief_update, literature_task,
    result_question); `targetRef` names the belief (B3) or clean result (R12) when the
    session's own is not meant. 201 with what it became, or 200 `created: false` when it was
    promoted before."""
    data = body_fields(("target", "target_ref"))
    _refuse_unknown(data, {"target", "target_ref"})
    session = ideation.get_session(ref)
    card = ideation.get_card(session, card_id)
    promoted = ideation.promote(session, card, data.get("target", ""), access.actor(), data.get("target_ref", ""))
    commit_then_run()
    return {"created": promoted.created, "message": promoted.message, "card": card_json(promoted.card)}, \
        201 if promoted.created else 200
