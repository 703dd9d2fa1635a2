"""The literature library as evidence (SPEC §11.3): `search_literature` over titles, authors,
abstracts, summaries and notes (the library's own full-text search), `read_literature` for one
item's metadata, abstract, summary, relevance and threat reasons and notes. Read-only; agents
cite an item by its title and DOI or arXiv id."""
from __future__ import annotations

import json

import sqlalchemy as sa

from models import Belief, db
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.core import registry
from services.core.errors import ValidationError
from services.core.redact import redact
from services.research import literature

SEARCH_LIMIT = 30
TEXT_SHOWN = 20_000


def _json(data) -> str:
    return json.dumps(data, indent=1, default=str)


def _cite(item) -> str:
    ident = f"doi:{item.doi}" if item.doi else f"arXiv:{item.arxiv_id}" if item.arxiv_id else item.url
    return f"{item.first_author.split()[-1] if item.first_author else 'Anon.'} {item.year or 'n.d.'}, " \
           f"“{item.title}”" + (f" ({ident})" if ident else "")


@tool("search_literature", "Search the literature library (papers, posts, reports the owner keeps) by words in "
                           "title, authors, abstract, summary or notes; optionally of one type or read state. Listed "
                           "by the library's score (highest first), then newest. Read one with read_literature.",
      {"text": {"type": "string", "maxLength": 300}, "type": {"type": "string", "enum": registry.LITERATURE_TYPES},
       "read_state": {"type": "string", "enum": registry.LITERATURE_READ_STATES},
       "limit": {"type": "integer", "description": f"at most {SEARCH_LIMIT}; default 10"}})
def search_literature(ctx: ToolContext, data: dict) -> ToolResult:
    text = (data.get("text") or "").strip()
    if not text and not data.get("type") and not data.get("read_state"):
        raise ValidationError("Give words to search for, a type, a read state, or some of them.", field="text")
    limit = max(1, min(int(data.get("limit") or 10), SEARCH_LIMIT))
    filters = literature.Filters(query=text, type=data.get("type"), read_state=data.get("read_state"))
    items = literature.search(filters, limit=limit)
    if not items:
        return ToolResult("No item in the library matches. Try fewer or other words.")
    found = [{"id": str(i.id), "cite": _cite(i), "title": i.title, "authors": i.authors[:5], "year": i.year,
              "type": i.type, "readState": i.read_state, "abstract": (i.abstract or "")[:400] or None}
             for i in items]
    return ToolResult(redact(_json({"items": found})))


@tool("read_literature", "One literature item by its id (from search_literature): metadata, abstract, summary, "
                         "why it matters, what it might undercut, and the owner's notes.",
      {"id": {"type": "string", "maxLength": 64}}, ["id"])
def read_literature(ctx: ToolContext, data: dict) -> ToolResult:
    item = literature.get_item(data["id"])
    record = literature.to_json(item)
    for name in ("abstract", "summaryMd", "relevanceReasonMd", "threatReasonMd", "notes"):
        if record[name] and len(record[name]) > TEXT_SHOWN:
            record[name] = record[name][:TEXT_SHOWN] + " …(cut)"
    record["cite"] = _cite(item)
    return ToolResult(redact(_json(record)))


# --- the literature agent's own tools (its run's scope is one literature item) -------------

BELIEFS_SHOWN = 50
RANK_MAX = 100


def scoped_item(ctx: ToolContext):
    """The literature item the run was started on."""
    if ctx.run.scope_kind != "literature" or ctx.run.scope_id is None:
        raise ValidationError("This run is not about a literature item.")
    return literature.get_item(ctx.run.scope_id)


@tool("list_beliefs", "The beliefs of the item's project (all projects' when the item has none): number, title, "
                      "what is believed, status, confidence. Judge relevance and threat against these.",
      {"limit": {"type": "integer", "description": f"at most {BELIEFS_SHOWN}; default 30"}})
def list_beliefs(ctx: ToolContext, data: dict) -> ToolResult:
    item = scoped_item(ctx)
    limit = max(1, min(int(data.get("limit") or 30), BELIEFS_SHOWN))
    statement = sa.select(Belief).where(Belief.status.not_in(("archived", "retracted")))
    if item.project_id:
        statement = statement.where(Belief.project_id == item.project_id)
    beliefs = list(db.session.scalars(statement.order_by(Belief.number).limit(limit)))
    if not beliefs:
        return ToolResult("No beliefs are recorded yet; judge relevance against the item's project alone.")
    return ToolResult(redact(_json({"beliefs": [
        {"number": b.number, "title": b.title, "currentBelief": b.current_belief[:1500], "status": b.status,
         "confidence": b.confidence} for b in beliefs]})))


@tool("write_literature_assessment", "Write this item's summary, why it matters (relevance) and what it might "
                                     "undercut (threat, naming beliefs by number), in markdown, and its rank score "
                                     "(0–1: how much reading it now would change what we believe).",
      {"summary_md": {"type": "string", "maxLength": 20_000}, "relevance_reason_md": {"type": "string", "maxLength": 20_000},
       "threat_reason_md": {"type": "string", "maxLength": 20_000}, "score": {"type": "number"}},
      ["summary_md", "relevance_reason_md", "threat_reason_md", "score"])
def write_literature_assessment(ctx: ToolContext, data: dict) -> ToolResult:
    item = scoped_item(ctx)
    if not 0 <= data["score"] <= 1:
        raise ValidationError("The score is between 0 and 1.", field="score")
    literature.update(item, {name: data[name] for name in ("summary_md", "relevance_reason_md", "threat_reason_md",
                                                            "score")})
    return ToolResult(f"Saved the assessment of “{item.title}” (score {data['score']:.2f}).")


@tool("rank_literature", "Set the rank score (0–1) of unread or queued items, to order the reading queue; "
                         "ids from search_literature (read_state unread).",
      {"scores": {"type": "array", "maxItems": RANK_MAX, "items": {
          "type": "object", "properties": {"id": {"type": "string"}, "score": {"type": "number"}},
          "required": ["id", "score"]}}}, ["scores"])
def rank_literature(ctx: ToolContext, data: dict) -> ToolResult:
    scoped_item(ctx)
    changed = []
    for entry in data["scores"]:
        item = literature.get_item(entry["id"])
        if item.read_state not in ("unread", "queued"):
            raise ValidationError(f"“{item.title}” is {item.read_state}; only unread or queued items are ranked.",
                                  field="scores")
        if not 0 <= entry["score"] <= 1:
            raise ValidationError("Scores are between 0 and 1.", field="scores")
        item.score = float(entry["score"])
        changed.append(item.title)
    return ToolResult(f"Ranked {len(changed)} item(s).")
