"""The literature library (SPEC §11.3): the list with search and filters, an item's page, adding
(by identifier or by hand), BibTeX import/export, Zotero import and feeds. Views are thin;
services/research/literature*.py, bibtex.py, zotero.py and feeds.py do the work."""
from __future__ import annotations

from flask import Blueprint, Response, current_app, redirect, request, url_for

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import render
from models import Project, db
from services.core import registry
from services.core.errors import SaganError, ValidationError
from services.core.sanitize import render_markdown
from services.research import bibtex, feeds, literature, literature_agent, zotero
from services.research.literature_sources import LookupFailed
from services.workflow import jobs

bp = Blueprint("library", __name__)
_STASH = "library"
PAGE_SIZE = 50


def _projects():
    return list(db.session.scalars(db.select(Project).order_by(Project.title)))


def _page(status: int = 200, **extra) -> Response:
    """The library page: the list for the query string's filters, the add forms and the feeds."""
    stashed = take_stash(_STASH)
    context = {"add_error": None, "add_form": {}, "manual_open": False, "already": None, "import_report": None,
               "feed_error": None, "feed_form": {}, "notice": None, **stashed, **extra}
    try:
        filters = literature.filters_from(request.args)
        filter_error = None
    except ValidationError as exc:
        filters, filter_error = literature.Filters(), exc.message
        status = 400
    items = literature.search(filters, limit=PAGE_SIZE)
    response = render("library/index.html", "library/_items.html", items=items, filters=filters,
                      filter_error=filter_error, total=literature.count(), types=registry.LITERATURE_TYPES,
                      read_states=registry.LITERATURE_READ_STATES, projects=_projects(), feeds=feeds.list_feeds(),
                      feed_kinds=registry.LITERATURE_FEED_KINDS, zotero=zotero.configured(), **context)
    response.status_code = status
    return response


@bp.get("/library")
@access.owner
def index():
    """The library: search, filters, the unread queue, adding, imports and feeds."""
    return _page()


def _after_add(added: literature.Added) -> Response:
    if not added.created:
        stash_for(_STASH, {"already": {"id": str(added.item.id), "title": added.item.title}})
        return redirect(url_for("library.index") + "#add", code=303)
    return redirect(url_for("library.item", item_id=added.item.id), code=303)


@bp.post("/library/add")
@access.owner
def add_by_identifier():
    """Add by arXiv id, DOI or URL; a failed lookup re-shows the manual form prefilled."""
    form = request.form
    result: dict = {}

    def action():
        result["added"] = literature.add_by_identifier(form.get("identifier", ""),
                                                       project_id=literature.project_id_of(form.get("project_id")))

    def refused(exc: SaganError):
        known = getattr(exc, "known", None)
        prefill = {**form, **(known or {})}
        if isinstance(prefill.get("authors"), list):
            prefill["authors"] = "\n".join(prefill["authors"])
        return _page(status=422, add_error=exc.message, add_form=prefill,
                     manual_open=isinstance(exc, LookupFailed))

    return perform(action, refused=refused, done=lambda: _after_add(result["added"]) if "added" in result
                   else redirect(url_for("library.index"), code=303))


@bp.post("/library/items")
@access.owner
def create():
    """Add an item by hand (always possible, offline too); a duplicate merges into the existing one."""
    form = request.form
    result: dict = {}

    def action():
        result["added"] = literature.add(dict(form), source="manual")

    return perform(action, refused=lambda exc: _page(status=422, add_error=exc.message, add_form=form,
                                                     manual_open=True),
                   done=lambda: _after_add(result["added"]) if "added" in result
                   else redirect(url_for("library.index"), code=303))


def _item_page(item, status: int = 200, error: str | None = None, form=None) -> Response:
    html = {name: render_markdown(getattr(item, name)) for name in
            ("summary_md", "relevance_reason_md", "threat_reason_md", "notes")}
    response = render("library/item.html", "library/_item_state.html", item=item, html=html, error=error,
                      form=form or {}, types=registry.LITERATURE_TYPES, read_states=registry.LITERATURE_READ_STATES,
                      projects=_projects(), agent_run=literature_agent.latest_run(item),
                      active_statuses=registry.RUN_ACTIVE_STATUSES)
    response.status_code = status
    return response


@bp.get("/library/<item_id>")
@access.owner
def item(item_id: str):
    """One item: metadata, abstract, summary and reasons, notes, read state."""
    return _item_page(literature.get_item(item_id))


@bp.post("/library/<item_id>")
@access.owner
def edit(item_id: str):
    """Save the item's edited fields (notes, summary, metadata); bad input re-shows the form."""
    row = literature.get_item(item_id)
    form = {k: v for k, v in request.form.items() if k in literature.EDITABLE}
    return perform(lambda: literature.update(row, form), keyed=False,
                   refused=lambda exc: _item_page(literature.get_item(item_id), 422, exc.message, request.form),
                   done=lambda: redirect(url_for("library.item", item_id=item_id) + "#saved", code=303))


@bp.post("/library/<item_id>/read-state")
@access.owner
def read_state(item_id: str):
    """Move an item to another read state (the list's and the page's quick actions)."""
    row = literature.get_item(item_id)
    state = request.form.get("read_state", "")
    back = request.form.get("back") == "list"

    def done():
        if back:
            return redirect(request.referrer if (request.referrer or "").startswith(request.host_url)
                            else url_for("library.index"), code=303)
        return _item_page(row) if request.htmx else redirect(url_for("library.item", item_id=item_id), code=303)

    return perform(lambda: literature.set_read_state(row, state), keyed=False,
                   refused=lambda exc: _item_page(row, 422, exc.message), done=done)


@bp.post("/library/import/bibtex")
@access.owner
@access.body_limit("LITERATURE_IMPORT_MAX_BYTES")
def import_bibtex():
    """Import a .bib upload: what parses is added (duplicates merge), each broken entry reported by line."""
    upload = request.files.get("file")
    project = request.form.get("project_id") or None
    report: dict = {}

    def action():
        if upload is None or not upload.filename:
            raise ValidationError("Choose a .bib file.", field="file")
        report["report"] = bibtex.import_bibtex(upload.read(current_app.config["LITERATURE_IMPORT_MAX_BYTES"] + 1),
                                                project_id=literature.project_id_of(project))

    def done():
        if "report" in report:
            found = report["report"]
            stash_for(_STASH, {"import_report": {"added": found.added, "merged": found.merged,
                                                 "problems": found.problems[:200],
                                                 "more_problems": max(0, len(found.problems) - 200)}})
        return redirect(url_for("library.index") + "#import", code=303)

    return perform(action, refused=lambda exc: _page(status=422, import_error=exc.message), done=done)


@bp.get("/library/export.bib")
@access.owner
def export_bibtex():
    """The library as BibTeX: all of it, or what the filters select."""
    items = literature.search(literature.filters_from(request.args), limit=100_000)
    response = Response(bibtex.export_bibtex(items), mimetype="application/x-bibtex")
    response.headers["Content-Disposition"] = 'attachment; filename="sagan-library.bib"'
    return response


@bp.post("/library/import/zotero")
@access.owner
def import_zotero():
    """Import the Zotero library set in Settings (read page by page; nothing written if a page fails)."""
    project = request.form.get("project_id") or None
    counts: dict = {}

    def action():
        counts.update(zotero.import_library(project_id=literature.project_id_of(project)))

    def done():
        if counts:
            stash_for(_STASH, {"notice": f"Zotero: {counts['added']} added, {counts['merged']} merged into items "
                                         f"already here, {counts['skipped']} skipped (notes, attachments, untitled)."})
        return redirect(url_for("library.index") + "#import", code=303)

    return perform(action, refused=lambda exc: _page(status=422, import_error=exc.message), done=done)


@bp.post("/library/feeds")
@access.owner
def create_feed():
    """Subscribe to an arXiv query or category or an RSS/Atom feed, polled on a schedule."""
    created: dict = {}

    def action():
        created["feed"] = feeds.create_feed(request.form)
        return []

    def done():
        if "feed" in created:
            feeds.enqueue_poll(created["feed"].id)
        return redirect(url_for("library.index") + "#feeds", code=303)

    return perform(action, refused=lambda exc: _page(status=422, feed_error=exc.message, feed_form=request.form),
                   done=done)


@bp.post("/library/feeds/<feed_id>/poll")
@access.owner
def poll_feed(feed_id: str):
    """Poll a feed now (a job; the feed shows the outcome)."""
    feed = feeds.get_feed(feed_id)
    feeds.enqueue_poll(feed.id)
    stash_for(_STASH, {"notice": f"Polling “{feed.label}”; new items appear unread."})
    return redirect(url_for("library.index") + "#feeds", code=303)


@bp.post("/library/feeds/<feed_id>/delete")
@access.owner
def delete_feed(feed_id: str):
    """Stop a feed (its items stay in the library)."""
    feed = feeds.get_feed(feed_id)
    return perform(lambda: feeds.delete_feed(feed), done=lambda: redirect(url_for("library.index") + "#feeds",
                                                                          code=303))


@bp.post("/library/<item_id>/assess")
@access.owner
def assess(item_id: str):
    """Ask the literature agent to summarise the item, say why it matters and what it might
    undercut against the project's beliefs, and rank the unread queue."""
    row = literature.get_item(item_id)
    started: dict = {}

    def action():
        started["run"] = literature_agent.start_assessment(row)

    def done():
        if "run" in started:
            jobs.enqueue_run(started["run"].id)
        return redirect(url_for("library.item", item_id=item_id) + "#assessment", code=303)

    return perform(action, refused=lambda exc: _item_page(literature.get_item(item_id), 409 if exc.status_code == 409
                                                          else 422, exc.message), done=done)
