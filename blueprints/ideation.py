"""Ideation (SPEC §12.4): the list of sessions (/ideas), a session's page (its deck with the
owner's answers, and its idea cards), and the actions on them. Views are thin;
services.planning.ideation does the work.

Answers autosave: htmx posts the answers form a moment after typing stops and swaps in the
"saved" line; without JavaScript the Save button posts the same form and comes back. A refused
post answers the page again with the sentence and what was typed, at 422 (bad input) or 409;
an htmx autosave gets the sentence in the saved line at 200, because htmx swaps only 2xx
answers."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for
from markupsafe import Markup

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import fragment_or_page, is_fragment_request
from models.ideation import IdeationSession
from services.core import registry
from services.core.clock import utcnow
from services.core.errors import SaganError, ValidationError
from services.planning import ideation
from services.workflow import jobs

bp = Blueprint("ideation", __name__)

NO_STORE = {"Cache-Control": "no-store"}


def markdown(text: str | None) -> Markup:
    """A card's body or an answer as sanitized HTML (services.core.sanitize is the only maker)."""
    return Markup(ideation.render_body(text))


def init_app(app) -> None:
    app.add_template_filter(markdown, "idea_markdown")
    app.add_template_global(ideation.label, "ideation_label")
    app.add_template_global(ideation.sessions_of, "ideation_sessions_of")


def _status(exc: SaganError) -> int:
    return 422 if isinstance(exc, ValidationError) else exc.status_code


def _stash_name(number: int) -> str:
    return f"ideation:{number}"


def _cards_context(session: IdeationSession, *, card_error: tuple | None = None, card_form: dict | None = None,
                   propose_error: SaganError | None = None) -> dict:
    run = ideation.latest_run(session)
    return {"session": session, "cards": ideation.cards(session), "run": run,
            "proposing": ideation.is_proposing(run), "card_error": card_error, "card_form": card_form or {},
            "propose_error": propose_error, "targets": registry.IDEA_PROMOTION_TARGETS,
            "target_nouns": ideation.PROMOTION_NOUNS}


def _page(session: IdeationSession, *, status: int = 200, answers_error: SaganError | None = None,
          typed: dict | None = None, **cards):
    stashed = take_stash(_stash_name(session.number))
    item, belief = ideation.nearest_records(session)
    questions = ideation.answered(session)
    if typed is not None:
        questions = [(n, q, typed.get(str(n), a)) for n, q, a in questions]
    body = render_template("ideation/detail.html", questions=questions, source=ideation.source_link(session),
                           nearest_item=item, nearest_belief=belief, answers_error=answers_error,
                           notice=stashed.get("notice"), source_noun=ideation.SOURCE_NOUNS[session.source_kind],
                           **_cards_context(session, **cards))
    return body, status, NO_STORE


@bp.get("/ideas")
@access.owner
def index():
    """Every session, newest first, with its source and how many cards wait or were promoted."""
    sessions = ideation.session_list()
    return render_template("ideation/index.html", sessions=sessions, counts=ideation.card_counts(sessions),
                           source_nouns=ideation.SOURCE_NOUNS), 200, NO_STORE


@bp.post("/ideas")
@access.owner
def start():
    """Start a session from a clean result, a belief, a literature item or a project (their
    pages' "Ideate" buttons); once per form key."""
    started: dict = {}
    kind, source_id = request.form.get("source_kind", ""), request.form.get("source_id", "")

    def action():
        started["session"] = ideation.start_session(kind, source_id, access.actor())

    def done():
        if "session" in started:
            return redirect(url_for("ideation.detail", number=started["session"].number), code=303)
        # A repeated form key: the newest session on that source is the one the first press made.
        made = ideation.sessions_of(kind, ideation.source_of(kind, source_id).record.id)
        return redirect(url_for("ideation.detail", number=made[0].number) if made else url_for("ideation.index"),
                        code=303)

    def refused(exc: SaganError):
        return render_template("ideation/refused.html", error=exc), _status(exc), NO_STORE

    return perform(action, done=done, refused=refused)


@bp.get("/ideas/<int:number>")
@access.owner
def detail(number: int):
    """A session: its deck with the owner's answers, and its idea cards."""
    return _page(ideation.get_session(number))


def _answers_from_form() -> dict:
    return {name.removeprefix("answer_"): value for name, value in request.form.items()
            if name.startswith("answer_")}


@bp.post("/ideas/<int:number>/answers")
@access.owner
def save_answers(number: int):
    """Save the answers (autosave through htmx, or the Save button)."""
    session = ideation.get_session(number)
    typed = _answers_from_form()

    def done():
        if is_fragment_request():
            return render_template("ideation/_answers_state.html", saved_at=utcnow(), error=None), 200, NO_STORE
        return redirect(url_for("ideation.detail", number=number) + "#deck", code=303)

    def refused(exc: SaganError):
        if is_fragment_request():
            return render_template("ideation/_answers_state.html", saved_at=None, error=exc), 200, NO_STORE
        return _page(ideation.get_session(number), status=_status(exc), answers_error=exc, typed=typed)

    return perform(lambda: ideation.save_answers(session, typed), done=done, refused=refused, keyed=False)


@bp.get("/ideas/<int:number>/cards")
@access.owner
def cards(number: int):
    """The cards panel (htmx polls it while Claude proposes); the page for a plain request."""
    session = ideation.get_session(number)
    return fragment_or_page(lambda: render_template("ideation/_cards.html", **_cards_context(session)),
                            lambda: redirect(url_for("ideation.detail", number=number) + "#cards"),
                            headers=NO_STORE)


@bp.post("/ideas/<int:number>/propose")
@access.owner
def propose(number: int):
    """Ask Claude to propose idea cards from the answers (a job; the cards panel shows its progress)."""
    session = ideation.get_session(number)
    started: dict = {}

    def action():
        started["run"] = ideation.start_proposals(session)

    def done():
        if "run" in started:
            jobs.enqueue_run(started["run"].id)
        return redirect(url_for("ideation.detail", number=number) + "#cards", code=303)

    return perform(action, done=done,
                   refused=lambda exc: _page(ideation.get_session(number), status=_status(exc), propose_error=exc))


@bp.post("/ideas/<int:number>/cards")
@access.owner
def add_card(number: int):
    """The owner's own card."""
    session = ideation.get_session(number)
    form = {"title": request.form.get("title", ""), "body_md": request.form.get("body_md", "")}
    return perform(lambda: ideation.add_card(session, form["title"], form["body_md"]),
                   done=lambda: redirect(url_for("ideation.detail", number=number) + "#cards", code=303),
                   refused=lambda exc: _page(ideation.get_session(number), status=_status(exc),
                                             card_error=("new", exc), card_form=form))


@bp.post("/ideas/<int:number>/cards/<card_id>/promote")
@access.owner
def promote(number: int, card_id: str):
    """Promote a card to an experiment, a belief update, a literature task or a clean-result
    question; a second press answers what the first one made."""
    session = ideation.get_session(number)
    card = ideation.get_card(session, card_id)
    outcome: dict = {}

    def action():
        outcome["promoted"] = ideation.promote(session, card, request.form.get("target", ""), access.actor(),
                                               request.form.get("target_ref", ""))

    def done():
        promoted = outcome.get("promoted")
        if promoted is None:  # a repeated form key: the card says what it became
            promoted = ideation.Promoted(ideation.get_card(ideation.get_session(number), card_id), False)
        stash_for(_stash_name(number), {"notice": promoted.message})
        return redirect(url_for("ideation.detail", number=number) + f"#card-{card_id}", code=303)

    return perform(action, done=done,
                   refused=lambda exc: _page(ideation.get_session(number), status=_status(exc),
                                             card_error=(card_id, exc)))


def _set_aside(number: int, card_id: str, change) -> object:
    session = ideation.get_session(number)
    card = ideation.get_card(session, card_id)
    return perform(lambda: change(card),
                   done=lambda: redirect(url_for("ideation.detail", number=number) + f"#card-{card_id}", code=303),
                   refused=lambda exc: _page(ideation.get_session(number), status=_status(exc),
                                             card_error=(card_id, exc)), keyed=False)


@bp.post("/ideas/<int:number>/cards/<card_id>/discard")
@access.owner
def discard(number: int, card_id: str):
    """Set a card aside (it stays on the session, and can be restored)."""
    return _set_aside(number, card_id, ideation.discard)


@bp.post("/ideas/<int:number>/cards/<card_id>/restore")
@access.owner
def restore(number: int, card_id: str):
    """Bring a discarded card back."""
    return _set_aside(number, card_id, ideation.restore)
