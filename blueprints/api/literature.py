"""The literature library (SPEC §11.3): list and search, read, create (by fields or by an
identifier looked up at arXiv / Crossref / Semantic Scholar), patch."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, int_arg
from services.core.errors import ValidationError
from services.research import literature

routes = Routes()

CREATE_FIELDS = (*literature.EDITABLE, "identifier")


@routes.get("/literature")
@access.api("read")
def list_literature():
    """Items matching `q` (full text), `type`, `readState`, `project`, in the unread queue's order."""
    filters = literature.filters_from(request.args)
    items = literature.search(filters, limit=int_arg("limit", 50, 1, 500), offset=int_arg("offset", 0, 0, 1_000_000))
    return {"items": [literature.to_json(item, full=False) for item in items]}


@routes.get("/literature/<item_id>")
@access.api("read")
def get_literature(item_id: str):
    """One item with its abstract, summary, reasons and notes."""
    return {"item": literature.to_json(literature.get_item(item_id))}


@routes.post("/literature")
@access.api("write")
def create_literature():
    """Add an item from its fields, or from `identifier` (arXiv id, DOI, URL); the same work
    already in the library is merged into (200, `created: false`), a new one is 201."""
    data = body_fields(CREATE_FIELDS)
    if "identifier" in data:
        if set(data) - {"identifier", "project_id"}:
            raise ValidationError("Send either identifier (and projectId) or the item's fields.", field="identifier")
        if not isinstance(data["identifier"], str):
            raise ValidationError("identifier must be text.", field="identifier")
        added = literature.add_by_identifier(data["identifier"],
                                             project_id=literature.project_id_of(data.get("project_id")))
    else:
        unknown = sorted(set(data) - set(literature.EDITABLE))
        if unknown:
            raise ValidationError(f"Unknown field(s): {', '.join(map(str, unknown))[:200]}.", field=str(unknown[0]))
        added = literature.add(data, source="manual")
    commit_then_run()
    return {"item": literature.to_json(added.item), "created": added.created}, 201 if added.created else 200


@routes.patch("/literature/<item_id>")
@access.api("write")
def patch_literature(item_id: str):
    """Change the given fields (notes, readState, summaryMd, tags, …)."""
    item = literature.get_item(item_id)
    data = body_fields(literature.EDITABLE)
    unknown = sorted(set(data) - set(literature.EDITABLE))
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(map(str, unknown))[:200]}.", field=str(unknown[0]))
    literature.update(item, data)
    commit_then_run()
    return {"item": literature.to_json(item)}
