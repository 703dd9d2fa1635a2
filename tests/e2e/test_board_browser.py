"""The board in a real browser: moves swap in place, polls keep boards in sync, phones fit.

Each test drives Chromium against the live server (tests/e2e/conftest.py) and asserts on
what the owner sees. Every test also checks that the Content-Security-Policy refused
nothing, since a refusal means some behaviour silently stopped working.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e.actions import DESKTOP, PHONE, assert_clean, assert_not_reloaded, move_card, open_board
from tests.e2e.fit import assert_no_sideways_scroll, small_controls

pytestmark = pytest.mark.browser


def test_move_menu_moves_card_without_reloading(browser_session, owner_account, make_experiment):
    """Does choosing a status in a card's menu put the card in the new column by an htmx swap?"""
    number = make_experiment("Does label smoothing help the probe?")
    session = browser_session()
    page = open_board(session)
    assert page.locator(f"[data-column=ideas] #card-{number}").is_visible()

    move_card(page, number, "planning")

    page.locator(f"[data-column=planning] #card-{number}").wait_for()
    assert page.locator(f"[data-column=ideas] #card-{number}").count() == 0
    assert_not_reloaded(page)
    assert page.locator(f"#card-{number} .chip").first.inner_text() == "planning"
    assert_clean(session)


def test_refused_move_is_explained_on_the_card(browser_session, owner_account, make_experiment):
    """Does a move that needs a note, sent without one, leave the card and say why on it?"""
    number = make_experiment("A move that needs a reason")
    session = browser_session()
    page = open_board(session)

    move_card(page, number, "archived")

    error = page.locator(f"#card-{number} .card-error")
    error.wait_for()
    assert "note" in error.inner_text().lower()
    assert page.locator(f"[data-column=ideas] #card-{number}").count() == 1
    assert page.locator(f"#card-{number} details.move").get_attribute("open") is not None
    assert_not_reloaded(page)
    assert_clean(session)


def test_second_browser_picks_up_a_move_by_polling(browser_session, owner_account, make_experiment,
                                                  fast_board_poll):
    """Does another device's open board show a card's move, and the new "Your turn" count, by polling?"""
    number = make_experiment("Seen from the phone too")
    laptop, phone = browser_session(), browser_session(PHONE)
    laptop_page, phone_page = open_board(laptop), open_board(phone)
    assert phone_page.locator(f"[data-column=ideas] #card-{number}").count() == 1
    assert phone_page.locator("#your-turn").inner_text() == "Your turn (0)"

    move_card(laptop_page, number, "blocked", note="Waiting for the A100 pool")

    laptop_page.locator(f"[data-column=blocked] #card-{number}").wait_for()
    assert laptop_page.locator("#your-turn").inner_text() == "Your turn (1)"
    phone_page.locator(f"[data-column=blocked] #card-{number}").wait_for(timeout=8_000)
    assert phone_page.locator(f"[data-column=ideas] #card-{number}").count() == 0
    assert phone_page.locator("#your-turn").inner_text() == "Your turn (1)"
    assert phone_page.locator("#your-turn").count() == 1
    assert_not_reloaded(phone_page)
    assert_clean(laptop)
    assert_clean(phone)


def test_unchanged_poll_answers_304_and_keeps_the_board(browser_session, owner_account, make_experiment,
                                                       fast_board_poll):
    """Is an unchanged board answered 304, and does the page keep its cards (no empty swap)?"""
    number = make_experiment("Still here after the poll")
    session = browser_session()
    page = open_board(session)
    statuses = []
    page.on("response", lambda r: statuses.append(r.status) if "/board/columns" in r.url else None)

    page.evaluate("window.__polls = 0; document.body.addEventListener('htmx:afterRequest', e => {"
                  " if (e.detail.pathInfo.requestPath.startsWith('/board/columns')) window.__polls++ })")
    # Three polls, or the board is gone (a 304 swapped in as an empty body ends polling too).
    page.wait_for_function("() => window.__polls >= 3 || !document.getElementById('board')",
                           timeout=10_000)

    assert page.locator("#board").count() == 1, "an unchanged poll wiped the board"
    assert statuses and set(statuses) == {304}, statuses
    assert page.locator(f"[data-column=ideas] #card-{number}").is_visible()
    assert page.locator("#board .column").count() >= 10
    assert_not_reloaded(page)
    assert_clean(session)


def test_open_move_menu_holds_the_poll_back(browser_session, owner_account, make_experiment, app,
                                            fast_board_poll):
    """Does an open "Move to…" menu survive a change elsewhere, with the board catching up after?"""
    mine = make_experiment("The card I am moving")
    other = make_experiment("Changed by someone else")
    session = browser_session()
    page = open_board(session)
    card = page.locator(f"#card-{mine}")
    card.get_by_text("Move to…").click()
    card.get_by_label(f"Note for #{mine}").fill("half-typed reason")

    from models import db
    from services.core.actors import Actor
    from services.workflow import experiments, lifecycle
    with app.app_context():
        lifecycle.transition(experiments.get_experiment(other), "clarifying", Actor("owner", None, "t"))
        db.session.commit()
    page.wait_for_timeout(2_500)  # two and a half poll intervals

    assert card.get_by_label(f"Note for #{mine}").input_value() == "half-typed reason"
    assert page.locator(f"[data-column=ideas] #card-{other}").count() == 1  # not swapped yet
    card.get_by_text("Move to…").click()  # close the menu: the held poll runs now
    page.locator(f"[data-column=clarifying] #card-{other}").wait_for(timeout=5_000)
    assert_clean(session)


def test_hidden_tab_stops_polling_and_catches_up_when_shown(browser_session, owner_account,
                                                            make_experiment, app, fast_board_poll):
    """Does a hidden tab send no polls, then refresh the board the moment it is shown again?"""
    number = make_experiment("Moved while the tab was in the background")
    session = browser_session()
    page = open_board(session)
    polls = []
    page.on("request", lambda r: polls.append(r.url) if "/board/columns" in r.url else None)
    page.evaluate("""() => window.__setHidden = hidden => {
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => hidden});
        Object.defineProperty(document, 'visibilityState', {configurable: true,
                                                            get: () => hidden ? 'hidden' : 'visible'});
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.evaluate("window.__setHidden(true)")
    page.wait_for_timeout(300)
    polls.clear()

    from models import db
    from services.core.actors import Actor
    from services.workflow import experiments, lifecycle
    with app.app_context():
        lifecycle.transition(experiments.get_experiment(number), "clarifying", Actor("owner", None, "t"))
        db.session.commit()
    page.wait_for_timeout(3_000)  # three poll intervals
    assert polls == []
    assert page.locator(f"[data-column=ideas] #card-{number}").count() == 1

    # htmx sends synchronously, so the held poll must leave inside the visibilitychange
    # handler itself, not at the next tick of the timer.
    sent_at_once = page.evaluate("""() => {
        let sent = 0;
        const count = e => { if (e.detail.pathInfo.requestPath.startsWith('/board/columns')) sent++; };
        document.addEventListener('htmx:beforeSend', count);
        window.__setHidden(false);
        document.removeEventListener('htmx:beforeSend', count);
        return sent;
    }""")
    assert sent_at_once == 1
    page.locator(f"[data-column=clarifying] #card-{number}").wait_for(timeout=5_000)
    assert_not_reloaded(page)
    assert_clean(session)


def submit_fixture_plan(app, number: int) -> str:
    """Give an experiment the fixture plan the approval tests use; returns the request id."""
    from pathlib import Path

    from models import db
    from services.core.actors import Actor
    from services.planning import approvals
    from services.workflow import experiments
    plan = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "two_pod_seed_sweep.md").read_text()
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number), plan,
                                           Actor("agent", None, "planner"), source="api")
        db.session.commit()
        return str(submission.approval.id)


@pytest.mark.parametrize("width", [390, 360])
def test_pages_fit_a_phone_without_sideways_scrolling(browser_session, owner_account, make_experiment,
                                                      app, width):
    """Do the board, an experiment and every other page fit a phone's width?"""
    numbers = [make_experiment(f"Experiment with a long title about warmup schedules number {i}",
                               tags="optim, a-rather-long-tag-name")
               for i in range(3)]
    make_experiment("Blocked on the pod", status="blocked")
    planned = make_experiment("Seed sweep with a plan", status="planning", pod_account="personal")
    approval = submit_fixture_plan(app, planned)
    session = browser_session({"width": width, "height": 800})
    page = open_board(session)
    for path in ["/", f"/experiments/{numbers[0]}", f"/experiments/{planned}", "/experiments",
                 "/your-turn", "/api-tokens", "/experiments/new", "/approvals", f"/approvals/{approval}",
                 "/settings"]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert_no_sideways_scroll(page, path)
    assert_clean(session)


# What a thumb hits instead: a stretched title covers its whole card or row, and a checkbox
# sits in a label that is the 44 px target.
TAP_EXEMPT = ".card-title, .queue-title, .skip-link, label input[type=checkbox], label input[type=radio]"


def test_phone_tap_targets_are_at_least_44px(browser_session, owner_account, make_experiment, app):
    """Are links, buttons, menus and fields big enough for a thumb on every main page?"""
    number = make_experiment("Thumb-sized controls", status="blocked")
    planned = make_experiment("Seed sweep with a plan", status="planning", pod_account="personal")
    approval = submit_fixture_plan(app, planned)
    session = browser_session(PHONE)
    page = open_board(session)
    problems = []
    for path in ["/", f"/experiments/{number}", f"/experiments/{planned}", "/experiments", "/your-turn",
                 "/api-tokens", "/experiments/new", "/approvals", f"/approvals/{approval}", "/settings"]:
        page.goto(path)
        page.evaluate("document.querySelectorAll('details.move').forEach(d => d.open = true)")
        problems += [f"{path}: {p}" for p in small_controls(page, TAP_EXEMPT)]
    assert problems == []


def test_owner_turn_cards_stand_out(browser_session, owner_account, make_experiment):
    """Does a card waiting for the owner look different from one waiting for Sagan?"""
    waiting = make_experiment("Waiting for approval", status="plan_pending")
    working = make_experiment("Sagan is on it", status="planning")
    session = browser_session()
    page = open_board(session)
    style = "el => { const s = getComputedStyle(el); return [s.backgroundColor, s.boxShadow] }"
    assert page.locator(f"#card-{waiting}").evaluate(style) != page.locator(f"#card-{working}").evaluate(style)
    assert re.match(r"Owner turn", page.locator(f"#card-{waiting} .turn").inner_text())


def test_status_panel_move_updates_in_place(browser_session, owner_account, make_experiment):
    """Does a move from the experiment page swap the status panel and the header count, not the page?"""
    number = make_experiment("Moved from its own page")
    session = browser_session(PHONE)
    session.login()
    page = session.page
    page.goto(f"/experiments/{number}")
    page.evaluate("window.__saganNoReload = true")
    assert page.locator("#your-turn").inner_text() == "Your turn (0)"

    page.locator("#status").get_by_label("Move to").select_option("blocked")
    page.locator("#status").get_by_label("Note", exact=True).fill("Needs a bigger GPU")
    page.locator("#status").get_by_role("button", name="Move").click()

    page.locator("#status .chip", has_text="blocked").wait_for()
    assert "Needs a bigger GPU" in page.locator("#status .status-reason").inner_text()
    assert page.locator("#your-turn").inner_text() == "Your turn (1)"
    assert_not_reloaded(page)
    assert_clean(session)



def test_the_board_at_1280_reads_every_column_through_its_index(browser_session, owner_account, app):
    """At 1280 px with the curated demo loaded: is every column with cards wide enough to read
    (no eleven 100 px columns breaking titles mid-word), does the board scroll sideways inside
    itself and not the page, does the index name all eleven columns with their counts, and does
    a press on the last one bring that column into view?"""
    from models import db
    from services.pipeline import demo
    with app.app_context():
        demo.load_curated()
        db.session.commit()
    session = browser_session({"width": 1280, "height": 900})
    page = session.login()
    page.goto("/board")
    page.locator("#board .column").first.wait_for()
    assert page.locator("#board .column").count() == 11
    widths = page.evaluate("Array.from(document.querySelectorAll('#board .column'))"
                           ".filter(c => c.querySelector('.card')).map(c => c.getBoundingClientRect().width)")
    assert widths and min(widths) >= 220, widths
    assert_no_sideways_scroll(page, "/board")
    index = page.locator("#board-index a")
    assert index.count() == 11
    assert index.first.inner_text().startswith("Ideas")
    last = page.locator("#board .column").last
    assert last.bounding_box()["x"] >= 1280  # off to the right before the jump
    index.last.click()
    page.wait_for_function("(() => { const r = document.querySelector('#board .column:last-child')"
                           ".getBoundingClientRect(); return r.left >= 0 && r.right <= window.innerWidth; })()")
    assert_clean(session)


def _photograph(page, name: str) -> None:
    """With SAGAN_SCREENSHOTS_DIR set (docs/screenshots/README.md), keep what the owner sees."""
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name))


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280px", "390px"])
def test_refused_move_keeps_the_chosen_status_for_the_next_try(browser_session, owner_account, make_experiment,
                                                               viewport):
    """Does a refused move leave the menu open holding the chosen status (and the
    note), so adding what was missing and tapping Move once more is enough?"""
    number = make_experiment("Blocked on a licence")
    session = browser_session(viewport)
    page = open_board(session)

    move_card(page, number, "blocked")  # blocked needs a note: refused

    card = page.locator(f"#card-{number}")
    card.locator(".card-error").wait_for()
    assert "needs a note" in card.locator(".card-error").inner_text()
    assert card.locator("details.move").get_attribute("open") is not None
    assert card.get_by_label(f"New status for #{number}").input_value() == "blocked"
    assert card.locator(".card-error").is_visible() and card.get_by_role("button", name="Move").is_visible()
    # The refusal is about the note: the cursor waits there (htmx focuses `autofocus` after a swap).
    page.wait_for_function("label => document.activeElement"
                           " && document.activeElement.getAttribute('aria-label') === label", arg=f"Note for #{number}")
    _photograph(page, f"board-refused-move-{'desktop' if viewport is DESKTOP else 'phone'}-light.png")

    card.get_by_label(f"Note for #{number}").fill("Waiting for the licence")
    card.get_by_role("button", name="Move").click()
    page.locator(f"[data-column=blocked] #card-{number}").wait_for()
    assert page.locator(f"#card-{number} .card-error").count() == 0
    assert_not_reloaded(page)
    assert_clean(session)


def test_refused_drop_offers_the_override_with_the_dropped_status(browser_session, owner_account,
                                                                  make_experiment):
    """A card dropped on a column it cannot move to (ideas → running): does the card name the
    status, and does its override link open the experiment page's override holding it?"""
    number = make_experiment("Straight to the GPUs")
    session = browser_session(DESKTOP)
    page = open_board(session)

    page.locator(f"#card-{number}").drag_to(page.locator("[data-column=running]"))

    card = page.locator(f"#card-{number}")
    card.locator(".card-error").wait_for()
    assert "cannot move from proposed to running" in card.locator(".card-error").inner_text()
    assert page.locator(f"[data-column=ideas] #card-{number}").count() == 1
    assert "You chose running" in card.locator(".card-override").inner_text()
    assert_not_reloaded(page)
    _photograph(page, "board-refused-drop-desktop-light.png")

    card.get_by_role("link", name="Override to running on the experiment page…").click()
    page.wait_for_url(f"**/experiments/{number}?override_to=running#status")
    override = page.locator("#status details.override")
    assert override.get_attribute("open") is not None
    assert override.get_by_label("Set to").input_value() == "running"
    override.get_by_label("Note (required)").fill("The plan was agreed by mail")
    override.get_by_role("button", name="Override").click()
    page.locator("#status .chip", has_text="running").wait_for()
    assert_clean(session)
