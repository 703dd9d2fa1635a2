"""The ideation agent's tools (SPEC §12.4): `read_ideation_session` for the deck, the owner's
answers, the source and its nearest literature item and belief; `propose_idea_cards` to put
cards on the session, marked as Claude's. Cards are rough work: promoting one into the record
is the owner's, so no tool here promotes."""
from __future__ import annotations

import json

from services.agents.toolkit import ToolContext, ToolResult, tool
from services.core.errors import ValidationError
from services.core.redact import redact
from services.planning import ideation

CARDS_PER_CALL = 8
SOURCE_TEXT_SHOWN = 4_000


def _source_text(session) -> str:
    source = ideation.source_of(session.source_kind, session.source_id)
    return source.text[:SOURCE_TEXT_SHOWN]


@tool("read_ideation_session", "The ideation session this run is about: its source (kind, title, text), the seven "
                               "questions of its deck with the owner's answers, the nearest literature item and "
                               "belief, and the cards already on it (do not propose those again).", {})
def read_ideation_session(ctx: ToolContext, data: dict) -> ToolResult:
    session = ideation.scoped_session(ctx.run)
    item, belief = ideation.nearest_records(session)
    record = {
        "session": ideation.label(session.number),
        "source": {"kind": session.source_kind, "title": session.title, "text": _source_text(session)},
        "questions": [{"number": n, "question": q, "answer": a or None} for n, q, a in ideation.answered(session)],
        "nearestLiterature": {"id": str(item.id), "title": item.title} if item else None,
        "nearestBelief": {"number": belief.number, "title": belief.title,
                          "currentBelief": belief.current_belief[:1500]} if belief else None,
        "cards": [{"title": c.title, "status": c.status, "by": c.origin} for c in ideation.cards(session)],
    }
    return ToolResult(redact(json.dumps(record, indent=1, default=str)))


@tool("propose_idea_cards", "Put idea cards on the session for the owner: each a short title (what to do or ask) "
                            "and a markdown body (why, from which answer, and how one would know). The owner "
                            "promotes the good ones; you never do.",
      {"cards": {"type": "array", "minItems": 1, "maxItems": CARDS_PER_CALL, "items": {
          "type": "object", "properties": {"title": {"type": "string", "maxLength": ideation.CARD_TITLE_MAX},
                                           "body_md": {"type": "string", "maxLength": ideation.CARD_BODY_MAX}},
          "required": ["title", "body_md"]}}}, ["cards"])
def propose_idea_cards(ctx: ToolContext, data: dict) -> ToolResult:
    session = ideation.scoped_session(ctx.run)
    if not data["cards"]:
        raise ValidationError("Propose at least one card.", field="cards")
    made = [ideation.add_card(session, card["title"], card.get("body_md", ""), origin="claude", run=ctx.run)
            for card in data["cards"]]
    return ToolResult(f"Put {len(made)} card(s) on {ideation.label(session.number)}: "
                      + "; ".join(card.title for card in made))
