"""The pipeline board, its cheap poll, card moves and the owner's queue."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from flask_wtf.csrf import generate_csrf
from markupsafe import Markup

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import fragment_or_page, render, unless_unchanged
from blueprints.filters import age
from services.core import registry
from services.core.clock import utcnow
from services.core.errors import SaganError
from services.dispatch import cost_ledger, system_metrics
from services.dispatch.view import board_progress
from services.planning import board_moves
from services.research import beliefs, projects
from services.workflow import experiments

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
    """The "Move to…" menu of the cards of one status (with the status before a block, and
    the kind: some moves are for some kinds only) on one board: the moves, the card's
    data-moves attribute, and the menu rendered with CARD_SLOT where each card's number goes
    (half the board's render time was this menu, card by card)."""
    moves: list
    data_moves: Markup
    details: str | None  # None: no moves from this status

    def for_card(self, number: int) -> Markup:
        return Markup(self.details.replace(CARD_SLOT, str(number)))


# Menus as rendered, kept across requests in this process: (macro code, status, status before a
# block, kind, move URL pattern) → (moves, data-moves, details with CSRF_SLOT for the session's
# token). A few dozen entries at most: the statuses times the kinds times the boards' filters.
_MENUS: dict = {}
MAX_MENUS = 2_000


def _card_menus(move_url_pattern: str, csrf: str):
    """`card_menu(experiment, move_data, move_details)` for the board's template: the card's
    CardMenu, rendered by the template's two macros the first time this process sees its
    status (and kind, and filters), then with this request's CSRF token put in its slot."""
    menus: dict = {}

    def card_menu(experiment, move_data, move_details) -> CardMenu:
        status_key = (experiment.status, experiment.status_before_block, experiment.kind)
        menu = menus.get(status_key)
        if menu is None:
            key = (move_details._func.__code__, *status_key, move_url_pattern)
            kept = _MENUS.get(key)
            if kept is None:
                moves = board_moves.options(experiment, "owner")
                details = (str(move_details(moves, CARD_SLOT, experiment.status, move_url_pattern, csrf=CSRF_SLOT))
                           if moves else None)
                if len(_MENUS) >= MAX_MENUS:
                    _MENUS.clear()
                kept = _MENUS[key] = (moves, move_data(moves), details)
            moves, data_moves, details = kept
            menu = menus[status_key] = CardMenu(moves, data_moves,
                                                details.replace(CSRF_SLOT, csrf) if details else None)
        return menu

    return card_menu


class CardBodies:
    """Rendered card bodies (templates/board/_card.html's `card_body`), kept across requests
    in this process and keyed by everything a body shows: the card's row, its pods' progress,
    its spend, its age as written, its menu's data-moves, the detail link's pattern — and the
    macro's code, so a template reloaded in development renders afresh (the macro object
    itself is new on every render: the board imports it "with context"). Rendering ~1,000
    cards was most of the board's time at 10,000 experiments; between two loads of the board
    few cards change, so most are a dictionary lookup. A card with a refused move on it is
    never kept (it shows what the owner typed), nor is the menu (it holds the session's CSRF
    token).

    At most MAX_ENTRIES bodies (a few KB each); past it the whole store is dropped and
    refilled by the next board."""

    MAX_ENTRIES = 4_000

    def __init__(self):
        self._bodies: dict = {}

    def clear(self) -> None:
        self._bodies = {}

    def body(self, card_body, experiment, facts: "CardFacts", menu: CardMenu, detail_url_pattern: str) -> str:
        spent = facts.spent
        # The card's row whole (its tags are a tuple: services/workflow/experiments.py::_card_tags).
        # Also what the card shows from elsewhere: idle paid GPUs (their repr: the flag's
        # words and price), and whether agents run (the turn is read as the owner's without).
        key = (card_body._func.__code__, experiment, facts.live, None if spent is None else tuple(vars(spent).values()),
               facts.age, repr(facts.idle), bool(current_app.config.get("ANTHROPIC_API_KEY")), menu.data_moves,
               detail_url_pattern)
        bodies = self._bodies
        body = bodies.get(key)
        if body is None:
            body = str(card_body(experiment, facts, menu))
            if len(bodies) >= self.MAX_ENTRIES:
                bodies = self._bodies = {}
            bodies[key] = body
        return body


CARD_BODIES = CardBodies()


def _board_cards(card_facts: dict, card_menu, detail_url_pattern: str):
    """`board_cards(cards, card, card_body, move_data, move_details)` for the board's
    template: a column's cards as one piece of HTML — each card's kept body, its menu with
    its number, the article's end; a card with a refusal by the whole `card` macro."""

    def board_cards(cards, card, card_body, move_data, move_details) -> Markup:
        parts = []
        for experiment in cards:
            facts = card_facts[experiment.id]
            if facts.refusal is not None:
                parts.append(str(card(experiment)))
                continue
            menu = card_menu(experiment, move_data, move_details)
            parts.append(CARD_BODIES.body(card_body, experiment, facts, menu, detail_url_pattern))
            if menu.details is not None:
                parts.append(menu.details.replace(CARD_SLOT, str(experiment.number)))
            parts.append("\n</article>")
        return Markup("".join(parts))

    return board_cards


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


def _board_context(filters: experiments.BoardFilters, card_errors: dict | None = None,
                   version: str | None = None) -> dict:
    # The version before the cards: a move landing between the two reads then leaves the page
    # a version older than its cards (one extra refresh), never newer (a move it would miss).
    version = version or experiments.board_version()
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
    card_menu = _card_menus(move_url_pattern, generate_csrf())
    detail_url_pattern = _url_with_slot("experiments.detail")
    return {
        "columns": columns,
        "card_facts": facts,
        "filters": filters,
        "tags": experiments.all_tags(version=version),
        "kinds": registry.EXPERIMENT_KINDS,
        "version": version,
        "poll_seconds": current_app.config["POLL_BOARD_SECONDS"],
        "card_menu": card_menu,
        "board_cards": _board_cards(facts, card_menu, detail_url_pattern),
        "card_slot": CARD_SLOT,
        "detail_url_pattern": detail_url_pattern,
    }


# Where a card's number goes in a part rendered once for all the cards of a status
# (templates/board/_card.html): a NUL, which nothing else in the rendered HTML can hold —
# escaped text never has one, and a URL carries one as %00. Likewise where the session's CSRF
# token goes in a menu kept across requests (the menu holds no text from outside).
CARD_SLOT = "\x00"
CSRF_SLOT = "\x01"


def _url_with_slot(endpoint: str, **args) -> str:
    """`endpoint`'s URL for a card, with CARD_SLOT for its number (the path's last segment):
    built once per board instead of once per card (url_for is most of a card's link)."""
    url = url_for(endpoint, number=0, **args)
    path, mark, query = url.partition("?")
    if not path.endswith("/0"):
        raise RuntimeError(f"{endpoint}'s URL no longer ends in the card's number: {url}")
    return f"{path[:-1]}{CARD_SLOT}{mark}{query}"


@bp.get("/board")
@access.owner
def index():
    """The board, or just its columns when the filter form asked through htmx; after a
    refused move without JavaScript, with the refusal on its card (once)."""
    filters = experiments.BoardFilters.from_args(request.args)
    stashed = take_stash(_STASH)
    card_errors = {int(number): CardRefusal(**refusal) for number, refusal in (stashed.get("cards") or {}).items()}
    return render("board/index.html", "board/_board.html", projects=projects.choices(),
                  **_board_context(filters, card_errors))


@bp.get("/board/columns")
@access.owner
def columns():
    """The polled board fragment; 304 when nothing changed since the version the page has."""
    version = experiments.board_version()
    return unless_unchanged(version, lambda: render_template(
        "board/_board.html", **_board_context(experiments.BoardFilters.from_args(request.args), version=version)))


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
                           idle_gpus=system_metrics.idle_everywhere(), belief_proposals=beliefs.pending_proposals())
