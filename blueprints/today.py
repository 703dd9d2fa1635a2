"""Today (SPEC §12.1): the home page, its cheap poll, and the actions of its "Needs you"
queue. Views are thin; services.planning.today gathers the sections and carries out the
actions through each item's own service.

An action answers htmx with the item's row: what happened, or the refusal (an item that
moved meanwhile, bad input) with the item's form again when it still waits — at 200,
because htmx swaps only 2xx answers. Without JavaScript the form posts the whole page,
which redirects back to Today (post/redirect/get) with the sentence shown once above the
queue."""
from __future__ import annotations

from flask import Blueprint, current_app, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import fragment_or_page, render, unless_unchanged
from services.core.errors import NotFound, SaganError, ValidationError
from services.day import daily_log
from services.dispatch import cost_ledger
from services.planning import today

bp = Blueprint("today", __name__)
_STASH = "today"


def _action_urls():
    """`act_url(kind, key)` for the rows: the route's URL built once per request and filled
    in per row (url_for for each of a hundred rows was a tenth of the page's time). Kinds are
    identifiers and keys numbers or UUIDs: nothing in them needs quoting."""
    pattern = url_for("today.act", kind="KIND", key="KEY")
    return lambda kind, key: pattern.replace("KIND", kind).replace("KEY", key)


def _context(version: str | None = None) -> dict:
    # The version is read before the sections: a change landing between the two reads then
    # makes the page's version older than its content (one extra refresh), never newer (a
    # page that would miss the change until the next one).
    version = version or today.version()
    needs = today.needs_you()
    day, entry = today.yesterday()
    return {"needs": needs, "running": today.running(), "yesterday": day, "yesterday_entry": entry,
            "next_up": today.next_up(), "spend": today.spend_so_far(), "version": version,
            "poll_seconds": current_app.config["POLL_BOARD_SECONDS"], "usd": cost_ledger.usd,
            "today_date": daily_log.today(), "act_url": _action_urls()}


@bp.get("/")
@access.owner
def index():
    """Today: what needs the owner, what runs, yesterday, what is next, what it cost."""
    return render("today/index.html", "today/_sections.html", notice=take_stash(_STASH) or None, **_context())


@bp.get("/today/live")
@access.owner
def live():
    """The polled sections; 304 when nothing changed since the version the page has."""
    version = today.version()
    return unless_unchanged(version, lambda: render_template("today/_sections.html", **_context(version)))


def _row_id(kind: str, key: str) -> str:
    return f"need-{kind}-{key}"


@bp.post("/today/<kind>/<key>")
@access.owner
def act(kind: str, key: str):
    """One action on one waiting item (the button's `action`)."""
    source = today.SOURCES.get(kind)
    if source is None or source.act is None:
        raise NotFound(f"Today has no action for {kind[:40]!r} items.")
    action = request.form.get("action", "")
    if action not in source.actions:
        raise ValidationError(f"Choose one of: {', '.join(source.actions)}.", field="action")
    form = request.form.to_dict()
    page = url_for("today.index") + f"#{_row_id(kind, key)}"
    outcome: dict = {}

    def run():
        acted = today.act(kind, key, action, form, access.actor())
        outcome["message"] = acted.message
        return acted.effects

    def answer(message: str, refused: bool):
        def row():
            # An item that still waits (a refusal, a deferred plan) keeps its row and form, with
            # what the owner typed after a refusal; the queue's count and the header's follow.
            needs = today.needs_you()
            item = next((n for n in needs if n.kind == kind and n.key == key), None)
            return render_template("today/_need_row.html", need=item, kind=kind, key=key, message=message,
                                   refused=refused, typed=form if refused else {}, usd=cost_ledger.usd,
                                   waiting=len(needs), act_url=_action_urls())

        def whole_page():
            stash_for(_STASH, {"message": message, "refused": refused, "row": _row_id(kind, key)})
            return redirect(page, code=303)

        return fragment_or_page(row, whole_page)

    return perform(run, keyed=False, refused=lambda exc: answer(exc.message, True),
                   refusals=(SaganError,), done=lambda: answer(outcome.get("message", "Done."), False))
