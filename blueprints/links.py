"""Typed links between records (SPEC §11.2): add one from a record's links panel, delete one
(after a confirmation), and the panel as its own page. The panel
(templates/links/_panel.html) is included by every record page that shows links; its forms
swap the panel in place with htmx, and without JavaScript post, then go back to the page.
Views are thin; services.research.links does the work."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request

from blueprints import access
from blueprints._actions import perform
from blueprints._htmx import fragment_or_page
from services.core.errors import SaganError, ValidationError
from services.research import links

bp = Blueprint("links", __name__)


def init_app(app) -> None:
    # Any record's page includes the panel with link_panel_for(kind, id) (templates/links/_panel.html).
    app.add_template_global(links.panel, "link_panel_for")


def _record_from_form():
    """The record whose panel the form is on (`record_kind`, `record_id`)."""
    return links.describe(request.form.get("record_kind", ""),
                          links.load(request.form.get("record_kind", ""), request.form.get("record_id", "")))


def _panel_answer(record, *, error: SaganError | None = None, form: dict | None = None, status: int = 200):
    """The refreshed panel (htmx), or the record's page (a plain post: success), or the panel
    on its own page with the refusal (a plain post: refused)."""
    def fragment():
        return render_template("links/_panel.html", link_panel=links.panel(record.kind, record.id),
                               link_error=error, link_form=form or {})

    def page():
        if error is None:
            return redirect(f"{record.url.split('#')[0]}#links", code=303)
        return render_template("links/panel.html", link_panel=links.panel(record.kind, record.id),
                               link_error=error, link_form=form or {}), status
    # htmx swaps only 2xx answers, so a refused htmx post shows its sentence at 200.
    return fragment_or_page(fragment, page)


@bp.get("/links")
@access.owner
def panel():
    """One record's links panel as a page (`kind`, `id`): where a no-JavaScript refusal lands."""
    record = links.describe(request.args.get("kind", ""),
                            links.load(request.args.get("kind", ""), request.args.get("id", "")))
    return render_template("links/panel.html", link_panel=links.panel(record.kind, record.id), link_error=None,
                           link_form={})


@bp.post("/links")
@access.owner
def create():
    """Link the panel's record to the one typed in `target`, with a kind and a note."""
    record = _record_from_form()
    form = {name: request.form.get(name, "") for name in ("kind", "target", "note")}

    def make():
        target = links.parse_reference(form["target"])
        links.create_link(record, form["kind"], target, access.actor(), form["note"])

    return perform(make, done=lambda: _panel_answer(record),
                   refused=lambda exc: _panel_answer(record, error=exc, form=form,
                                                     status=422 if isinstance(exc, ValidationError)
                                                     else exc.status_code))


@bp.post("/links/<link_id>/delete")
@access.owner
def delete(link_id: str):
    """Delete a link (the form asked first); one already gone is not an error."""
    record = _record_from_form()

    def remove():
        try:
            link = links.get_link(link_id)
        except SaganError:
            return None
        links.delete_link(link)
        return None

    return perform(remove, done=lambda: _panel_answer(record), keyed=False)
