"""The one shape of a state-changing view: try the domain action; on a
domain error roll back and answer the refusal; else commit, then run the side effects the
action returned (after the commit, so a job never sees uncommitted rows).

A form that creates something carries a one-time `form_key` (templates: `form_key_field()`):
the first post with that key acts, a reload or a second tap finds it claimed and only
answers as the first one did, so nothing is created twice.

Full-page forms redirect after the post (post/redirect/get) also when refused: the refusal
and what the owner typed go into a one-time stash the next GET of that page reads, so a
reload of the refusal page is a harmless GET.
"""
from __future__ import annotations

from typing import Callable, Iterable

from flask import Response, request, session
from markupsafe import Markup, escape

from models import db
from services.core import once
from services.core.errors import SaganError, ValidationError
from services.workflow import lifecycle

Effects = Iterable[lifecycle.SideEffect] | None
_STASH_SESSION_KEY = "sagan_stash"
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def perform(action: Callable[[], Effects | object], *, done: Callable[[], Response],
            refused: Callable[[SaganError], Response] | None = None,
            refusals: tuple[type[SaganError], ...] = (SaganError,), keyed: bool = True) -> Response:
    """Run `action` once per form key; `refused(error)` answers a domain error (after the
    rollback), `done()` answers success and a repeated key alike.

    Only the error classes in `refusals` are answered by `refused`; any other domain error,
    or every one when there is no `refused`, is rolled back and goes on to the app's error
    handler (blueprints/errors.py), which answers with its status and sentence (the toast).

    `keyed=False` for an action that only sets a value (a checklist tick), which a repeat
    cannot double: it must leave the form key alone, because htmx sends the enclosing
    form's fields with it, and claiming that key would make the form's own post a no-op."""
    key = _form_key() if keyed else None
    if key is not None and not once.claim_form_key(key):
        return done()
    try:
        effects = action()
    except SaganError as exc:
        db.session.rollback()
        if key is not None:
            once.release_form_key(key)
        if refused is None or not isinstance(exc, refusals):
            raise
        return refused(exc)
    # Services return their side effects as a list; an action that returns the row it
    # created (or nothing) has none.
    commit_then_run(effects if isinstance(effects, (list, tuple)) else ())
    return done()


def commit_then_run(effects: Iterable = ()) -> None:
    """Commit the request's work, then run the side effects it returned: after the commit,
    so a job they enqueue never reads rows that are not there yet.

    perform's last step, and on its own the whole of it for a JSON API view: an API view has
    no refusal to render and no form key, so a domain error raised before this goes to the
    error handler (blueprints/errors.py) and the request's session is rolled back as it ends."""
    db.session.commit()
    lifecycle.run_side_effects(e for e in effects if isinstance(e, lifecycle.SideEffect))


def _form_key() -> str | None:
    """The post's form key; a malformed one is refused before anything runs."""
    if request.mimetype not in _FORM_TYPES:
        # A JSON post or a pod's raw upload carries no form key; reading `request.form`
        # there would parse (or, for a body read without caching, lose) what it sent.
        return None
    key = request.form.get("form_key")
    if not key:
        return None
    if len(key) > once.FORM_KEY_MAX or not key.replace("-", "").replace("_", "").isalnum():
        raise ValidationError("This form's key is malformed; reload the page and send it again.",
                              field="form_key")
    return key


def form_key_field() -> Markup:
    """The hidden one-time key of a form that creates something."""
    return Markup(f'<input type="hidden" name="form_key" value="{escape(once.new_form_key())}">')


def stash_for(page: str, payload: dict) -> None:
    """Keep `payload` for the next GET of `page` (a name such as "experiment:12")."""
    session[_STASH_SESSION_KEY] = {"page": page, "key": once.stash(payload)}


def take_stash(page: str) -> dict:
    """What the last post stashed for `page`, once; {} when there is nothing (or it was
    for another page, which then keeps it)."""
    pointer = session.get(_STASH_SESSION_KEY)
    if not pointer or pointer.get("page") != page:
        return {}
    session.pop(_STASH_SESSION_KEY)
    return once.take(pointer["key"]) or {}


def init_app(app) -> None:
    app.add_template_global(form_key_field)
