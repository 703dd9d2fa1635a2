"""The literature library as evidence (SPEC §11.3): `search_literature` over titles, authors,
abstracts, summaries and notes (the library's own full-text search), `read_literature` for one
item's metadata, abstract, summary, relevance and threat reasons and notes. Read-only; agents
cite an item by its title and DOI or arXiv id."""
from __future__ import annotations

import json

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
                           "title, authors, abstract, summary or notes; optionally of one type or read state. Best "
                           "match first. Read one with read_literature.",
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
