"""The pipeline board, its cheap poll, card moves and the owner's queue."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from markupsafe import Markup

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import fragment_or_page, render, unless_unchanged
from blueprints.filters import age
from services import board_moves, cost_ledger, experiments, registry, system_metrics
from services.clock import utcnow
from services.dispatch.view import board_progress
from services.errors import SaganError

bp = Blueprint("board", __name__)
_STASH = "board"


@dataclass(frozen=True)
class CardRefusal:
    """A refused move as its card shows it: the sentence, and what the owner chose (the
    target and the note), which the card's menu keeps so a second try starts from there."""
    message: str
    to: str
    note: str
    field: str | None = None  # the input the refusal is about ("note": it gets the focus)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class CardMenu:
    """The "Move to…" menu of the cards of one status (and status before a block) on one
    board: the moves, the card's data-moves attribute, and the menu rendered once with
    CARD_SLOT where each card's number goes (half the board's render time was this menu,
    card by card)."""
    moves: list
    data_moves: Markup
    details: Markup | None  # None: no moves from this status

    def for_card(self, number: int) -> Markup:
        return Markup(self.details.replace(CARD_SLOT, str(number)))


def _card_menus(move_url_pattern: str):
    """`card_menu(experiment, move_data, move_details)` for the board's template: the card's
    CardMenu, made with the template's two macros the first time its status is seen."""
    menus: dict = {}

    def card_menu(experiment, move_data, move_details) -> CardMenu:
        status_key = (experiment.status, experiment.status_before_block)
        menu = menus.get(status_key)
        if menu is None:
            moves = board_moves.options(experiment, "owner")
            details = move_details(moves, CARD_SLOT, experiment.status, move_url_pattern) if moves else None
            menu = menus[status_key] = CardMenu(moves, move_data(moves), details)
        return menu

    return card_menu


class CardFacts(NamedTuple):
    """What a card shows besides its experiment's own fields, gathered for all the cards in
    one pass: in the template each of these was a call of its own per card, and a call
    from a template costs several microseconds, times 274 cards. (A named tuple: a frozen
    dataclass's constructor cost more than the rest of the pass.)"""
    live: tuple | None          # the pods' (progress %, message), for a card that has pods running
    spent: cost_ledger.Ledger | None
    refusal: CardRefusal | None
    moment_iso: str             # when the experiment last moved, for the age's tooltip
    age: str
    idle: list                  # its paid pods whose GPUs idle while their script runs (system_metrics.IdleGpu)


def _card_facts(cards: list, pod_progress: dict, card_spend: dict, card_errors: dict, idle: dict) -> dict:
    now = utcnow()
    facts = {}
    for experiment in cards:
        moment = experiment.last_event_at or experiment.created_at
        facts[experiment.id] = CardFacts(pod_progress.get(experiment.id), card_spend.get(experiment.id),
                                         card_errors.get(experiment.number), moment.isoformat(), age(moment, now),
                                         idle.get(experiment.id, ()))
    return facts


def _board_context(filters: experiments.BoardFilters, card_errors: dict | None = None) -> dict:
    columns = experiments.board(filters)
    cards = [e for c in columns for e in c.cards]
    move_url_pattern = _url_with_slot("board.move", **filters.as_args())
    with_pods = [e.id for c in columns if c.key in ("implementing", "running", "blocked") for e in c.cards
                 if not e.pod_free]
    # Live pod progress for the cards that can have pods, in one query for all; every
    # card's spend so far (agents + GPU), in two queries for the whole board.
    # and their paid pods whose GPUs idle, in two at most.
    facts = _card_facts(cards, board_progress(with_pods), cost_ledger.ledgers_for(cards, with_estimates=False),
                        card_errors or {}, system_metrics.idle_by_experiment(with_pods))
    return {
        "columns": columns,
        "card_facts": facts,
        "filters": filters,
        "tags": experiments.all_tags(),
        "kinds": registry.EXPERIMENT_KINDS,
        "version": experiments.board_version(),
        "poll_seconds": current_app.config["POLL_BOARD_SECONDS"],
        "card_menu": _card_menus(move_url_pattern),
        "card_slot": CARD_SLOT,
        "detail_url_pattern": _url_with_slot("experiments.detail"),
    }


# Where a card's number goes in a part rendered once for all the cards of a status
# (templates/board/_card.html): a NUL, which nothing else in the rendered HTML can hold —
# escaped text never has one, and a URL carries one as %00.
CARD_SLOT = "\x00"


def _url_with_slot(endpoint: str, **args) -> str:
    """`endpoint`'s URL for a card, with CARD_SLOT for its number (the path's last segment):
    built once per board instead of once per card (url_for is most of a card's link)."""
    url = url_for(endpoint, number=0, **args)
    path, mark, query = url.partition("?")
    if not path.endswith("/0"):
        raise RuntimeError(f"{endpoint}'s URL no longer ends in the card's number: {url}")
    return f"{path[:-1]}{CARD_SLOT}{mark}{query}"


@bp.get("/")
@access.owner
def index():
    """The board, or just its columns when the filter form asked through htmx; after a
    refused move without JavaScript, with the refusal on its card (once)."""
    filters = experiments.BoardFilters.from_args(request.args)
    stashed = take_stash(_STASH)
    card_errors = {int(number): CardRefusal(**refusal) for number, refusal in (stashed.get("cards") or {}).items()}
    return render("board/index.html", "board/_board.html", **_board_context(filters, card_errors))


@bp.get("/board/columns")
@access.owner
def columns():
    """The polled board fragment; 304 when nothing changed since the version the page has."""
    return unless_unchanged(experiments.board_version(), lambda: render_template(
        "board/_board.html", **_board_context(experiments.BoardFilters.from_args(request.args))))


@bp.post("/board/move/<int:number>")
@access.owner
def move(number: int):
    """Move a card; answers the refreshed board with the refusal, if any, on the card, its
    menu still holding the status and note the owner chose."""
    filters = experiments.BoardFilters.from_args(request.args)
    experiment = experiments.get_experiment(number)
    chosen, note = request.form.get("to", ""), request.form.get("note")

    # Without JavaScript the form is a full-page post: it redirects back to the board
    # (post/redirect/get, so a reload moves nothing), a refusal riding along in the stash.
    board_page = url_for("board.index", **filters.as_args()) + f"#card-{number}"

    def refused(exc: SaganError):
        refusal = CardRefusal(exc.message, chosen, note or "", getattr(exc, "field", None))

        def page():
            stash_for(_STASH, {"cards": {str(number): asdict(refusal)}})
            return redirect(board_page, code=303)

        return fragment_or_page(
            lambda: render_template("board/_board.html", **_board_context(filters, {number: refusal})), page)

    return perform(lambda: board_moves.move(experiment, chosen, access.actor(), note=note,
                                            expected_status=request.form.get("expected") or None),
                   refused=refused,
                   done=lambda: fragment_or_page(
                       lambda: render_template("board/_board.html", **_board_context(filters)),
                       lambda: redirect(board_page, code=303), headers={"HX-Trigger": "pipeline-changed"}))


@bp.get("/your-turn")
@access.owner
def your_turn():
    """What waits for the owner, and why."""
    return render_template("board/your_turn.html", experiments=experiments.owner_turn_list(),
                           idle_gpus=system_metrics.idle_everywhere())
