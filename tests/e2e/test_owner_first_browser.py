"""What the owner meets first, on a phone and a laptop: the approval as one button on the first
screen, checklist boxes that are the owner's to tick, typed answers that survive a reload, a
finished experiment that opens on its finding, figures readable in light and dark, and a
status move that changes every panel at once."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from models import db
from services.core.actors import Actor
from services.planning import approvals
from services.results import results, shares
from services.workflow import experiments
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.pixels import background_and_ink, contrast, encode_png, luminance

pytestmark = pytest.mark.browser

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLAN = (FIXTURES / "plans" / "two_pod_seed_sweep.md").read_text()
RESULT_HTML = (FIXTURES / "results" / "clean_result.html").read_text()
QUESTION = "Does the easy-to-hard curriculum speed up the 125M model?"
FINDING_TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
ANALYZER = Actor("agent", None, "analyzer")
OWNER = Actor("owner", None, "Owner")
# A chart as plotting libraries write it: no background of its own, every shape styled inline.
TRANSPARENT_SVG = """<svg xmlns="http://www.w3.org/2000/svg" width="300" height="150" viewBox="0 0 300 150">
 <path d="M 0 150 L 300 150 L 300 0 L 0 0 z" style="fill: none"/>
 <path d="M 20 130 L 290 130 M 20 130 L 20 10" style="fill: none; stroke: #000000; stroke-width: 3"/>
 <path d="M 30 110 L 100 60 L 170 80 L 240 30 L 285 40" style="fill: none; stroke: #000000; stroke-width: 4"/>
</svg>"""


def _transparent_png() -> bytes:
    """Black axes and a black diagonal on a fully transparent 200×120 background."""
    def pixel(x, y):
        ink = x < 4 or y > 115 or abs(y - (110 - x // 2)) < 3
        return (0, 0, 0, 255) if ink else (0, 0, 0, 0)
    return encode_png(200, 120, pixel)


def _keep(page, name: str, full_page: bool = False) -> None:
    """With SAGAN_SCREENSHOTS_DIR set (docs/screenshots/README.md), keep what the owner sees."""
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name), full_page=full_page)


def _width(viewport: dict) -> str:
    return "phone" if viewport["width"] < 600 else "desktop"


def _on_first_screen(page, locator) -> bool:
    """Is the element wholly inside the viewport before any scrolling?"""
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= page.viewport_size["height"]


@pytest.fixture
def pending_plan(app, make_experiment):
    number = make_experiment("Seed sweep on a phone", status="planning", pod_account="personal")
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number), PLAN,
                                           Actor("agent", None, "planner"), source="agent")
        db.session.commit()
        return number, str(submission.approval.id)


@pytest.fixture
def finished(app, make_experiment):
    """A shared experiment whose result's title replaced the question, with two figures that
    have transparent backgrounds (an inline-styled SVG and a PNG)."""
    number = make_experiment(QUESTION, status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, RESULT_HTML, ANALYZER, title=FINDING_TITLE)
        svg = results.attach_markup(experiment, "svg", TRANSPARENT_SVG, ANALYZER, title="Transparent SVG")
        png = results.attach_upload(experiment, "chart.png", _transparent_png(), ANALYZER, title="Transparent PNG")
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        _link, token = shares.create_link(scope="experiment", experiment=experiment, label="for a mentor")
        db.session.commit()
        return {"number": number, "svg": str(svg.id), "png": str(png.id), "token": token}


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])
def test_with_a_plan_pending_the_approval_is_one_button_on_the_first_screen(browser_session, owner_account,
                                                                           pending_plan, viewport):
    """With a plan pending, is "Review plan v1 and approve" one large button inside the first
    screen (no scrolling), above the generic "Move to" form, which is folded away; and does it
    open the approval?"""
    number, request_id = pending_plan
    session = browser_session(viewport)
    page = session.login()
    page.goto(f"/experiments/{number}")
    button = page.locator("#owner-action-button")
    assert button.inner_text().strip() == "Review plan v1 and approve"
    assert _on_first_screen(page, button)
    assert button.bounding_box()["height"] >= 48
    assert button.bounding_box()["y"] < page.locator("#status").bounding_box()["y"]
    assert not page.get_by_label("Move to").is_visible()  # folded under "Move to another status…"
    _keep(page, f"experiment-plan-pending-{_width(viewport)}-light.png")
    button.click()
    page.wait_for_url(f"**/approvals/{request_id}")
    assert_clean(session)


def test_every_owner_box_starts_unticked(browser_session, owner_account, pending_plan):
    """The planner wrote `- [x]` for one item: at 390 px, is every one of the owner's boxes
    unticked, the planner's own tick shown as a label beside that item?"""
    _, request_id = pending_plan
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/approvals/{request_id}")
    boxes = page.locator(".checklist input[type=checkbox]")
    assert boxes.count() == 3
    assert [boxes.nth(i).is_checked() for i in range(3)] == [False, False, False]
    planner = page.locator(".check-item", has=page.locator(".planner-checked"))
    assert planner.count() == 1 and "Goal and hypothesis match the record" in planner.inner_text()
    page.locator(".checklist").scroll_into_view_if_needed()
    _keep(page, "approval-checklist-unticked-phone-light.png")
    assert_clean(session)


def test_typed_answers_and_ticks_survive_a_reload(app, browser_session, owner_account, pending_plan):
    """At 390 px the owner types two textbox answers and ticks a box, then reloads (a phone
    dropping the tab): are the typed answers and the tick all still there?"""
    _, request_id = pending_plan
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/approvals/{request_id}")
    page.get_by_label("Budget notes").fill("Up to $10 is fine.")
    page.locator("label.textbox", has_text="Budget notes").locator(".tick-status", has_text="Saved").wait_for()
    seeds = page.get_by_label("Seed list")
    seeds.click()
    seeds.type("0, 1, 2")
    page.get_by_role("checkbox", name="Ten seeds are enough").check()  # leaving the box saves it too
    page.locator("label.textbox", has_text="Seed list").locator(".tick-status", has_text="Saved").wait_for()
    page.locator(".check-item", has_text="Ten seeds are enough").get_by_text("Saved").wait_for()
    page.reload()
    assert page.get_by_label("Budget notes").input_value() == "Up to $10 is fine."
    assert page.get_by_label("Seed list").input_value() == "0, 1, 2"
    assert page.get_by_role("checkbox", name="Ten seeds are enough").is_checked()
    with app.app_context():
        assert approvals.get_request(request_id).answers == {"budget-notes": "Up to $10 is fine.",
                                                            "seed-list": "0, 1, 2"}
    assert_clean(session)


def test_a_refused_autosave_says_why_beside_the_box(app, browser_session, owner_account, pending_plan):
    """The request is decided in another tab while the owner types: does the box say why its
    answer was not saved (not a silent failure, not a toast far away)?"""
    _, request_id = pending_plan
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/approvals/{request_id}")
    with app.app_context():
        approvals.reject(approvals.get_request(request_id), OWNER, note="Decided elsewhere.")
        db.session.commit()
    page.get_by_label("Budget notes").fill("Too late.")
    slot = page.locator("label.textbox", has_text="Budget notes").locator(".tick-status.error")
    slot.wait_for()
    assert "already rejected" in slot.inner_text()
    assert page.locator("#toasts .toast").count() == 0
    assert_clean(session)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])
def test_a_finished_experiment_opens_on_its_finding(browser_session, owner_account, finished, viewport, scheme):
    """A finished experiment at 390 px and 1280 px: does the header keep the question, and the
    first screen show the finding with its confidence, the key numbers and the primary figure,
    with the status panel and the moves below?"""
    session = browser_session(viewport, color_scheme=scheme)
    page = session.login()
    page.goto(f"/experiments/{finished['number']}")
    assert QUESTION in page.locator("h1").inner_text()
    summary = page.locator("#result-summary")
    finding = summary.locator("#result-finding")
    assert finding.inner_text() == "Curriculum ordering changes final loss by <1%"
    assert _on_first_screen(page, finding)
    chip = summary.locator(".chip.confidence")
    assert chip.inner_text() == "MODERATE confidence" and _on_first_screen(page, chip)
    numbers = summary.locator(".key-numbers")
    assert "curriculum 2.871 vs. shuffled 2.888" in numbers.inner_text() and _on_first_screen(page, numbers)
    frame = summary.locator("iframe.summary-frame")
    frame.content_frame.locator("svg").first.wait_for()
    page.wait_for_function("""() => { const f = document.querySelector('iframe.summary-frame');
        return f.style.height !== '' && f.contentDocument.querySelector('svg').getBoundingClientRect().height > 50; }""")
    _keep(page, f"experiment-finished-first-screen-{_width(viewport)}-{scheme}.png")
    assert _on_first_screen(page, frame)
    assert page.locator("#status").bounding_box()["y"] > frame.bounding_box()["y"]
    assert_clean(session)


def _figure_pixels(page, selector: str):
    element = page.locator(selector)
    element.scroll_into_view_if_needed()
    return background_and_ink(element.screenshot())


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_transparent_figures_are_readable_in_the_grid(browser_session, owner_account, finished, scheme):
    """A transparent SVG (styled inline, as plotting libraries write it) and a transparent PNG,
    in the figure grid of the owner's page and of the mentor's page, in light and in dark: does
    each sit on a light paper with its black strokes standing out (by the pixels of a
    screenshot), rather than a black rectangle or black on dark?"""
    session = browser_session(DESKTOP, color_scheme=scheme)
    page = session.login()
    pages = (f"/experiments/{finished['number']}", f"/s/{finished['token']}/{finished['number']}")
    for path in pages:
        page.goto(path)
        frame = page.locator(f"#figure-{finished['svg']} iframe")
        frame.content_frame.locator("svg path").first.wait_for()
        page.wait_for_function("(id) => document.querySelector(`#figure-${id} iframe`).style.height !== ''",
                               arg=finished["svg"])
        for selector in (f"#figure-{finished['svg']} iframe", f"#figure-{finished['png']} img"):
            background, ink, marked = _figure_pixels(page, selector)
            where = f"{path} {selector} ({scheme})"
            assert luminance(background) > 0.8, f"{where}: background {background} is not a light paper"
            assert luminance(ink) < 0.1 and contrast(ink, background) > 7, f"{where}: strokes {ink} do not stand out"
            assert 0.003 < marked < 0.4, f"{where}: {marked:.1%} of the picture differs from its background"
        if os.environ.get("SAGAN_SCREENSHOTS_DIR"):
            kind = "share" if path.startswith("/s/") else "owner"
            page.locator(".figures").screenshot(
                path=str(Path(os.environ["SAGAN_SCREENSHOTS_DIR"]) / f"figure-grid-{kind}-desktop-{scheme}.png"))
    assert_clean(session)


def test_the_mentors_result_card_is_dark_in_dark_mode(browser_session, finished):
    """The mentor opens the share link with the system in dark mode: is the result card (a
    result styled for a light page) dark with light text, not a bright white card — and does
    its figure keep its own light paper?"""
    session = browser_session(PHONE, color_scheme="dark")
    page = session.page
    page.goto(f"/s/{finished['token']}/{finished['number']}")
    frame = page.locator(".share-result iframe")
    frame.content_frame.locator("#tldr").wait_for()
    page.wait_for_function("() => document.querySelector('.share-result iframe').style.height !== ''")
    tldr = frame.content_frame.locator("#tldr")
    background, ink, _ = background_and_ink(tldr.screenshot())
    assert luminance(background) < 0.1, f"the TL;DR box is {background} in dark mode"
    assert contrast(ink, background) > 7, f"its text {ink} does not stand out from {background}"
    _keep(page, "mentor-result-phone-dark.png")
    figure = frame.content_frame.locator("#figure svg")
    paper, _, _ = background_and_ink(figure.screenshot())
    assert luminance(paper) > 0.6, f"the figure inside lost its light paper: {paper}"
    assert_clean(session)


@pytest.fixture
def slow_page_poll(app, monkeypatch):
    """The page's own poll far off: only the move's answer can change the panels in time."""
    monkeypatch.setitem(app.config, "POLL_EXPERIMENT_SECONDS", 600)


def test_a_move_changes_every_panel_at_once_without_a_reload(app, browser_session, owner_account, make_experiment,
                                                             slow_page_poll, monkeypatch):
    """Moving an experiment to Clarifying from its page (agents on, so the turns are Sagan's):
    do the status panel, the stepper's "Next: …" and the timeline all show the move without a
    reload (no waiting for a poll)?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "sk-ant-test-0000000000000000")
    number = make_experiment("Warmup and the loss spike")
    session = browser_session(DESKTOP)
    page = session.login()
    page.goto(f"/experiments/{number}")
    page.evaluate("window.__neverReloaded = true")
    assert "Next: Sagan — clarify scope" in page.locator("#stepper").inner_text()
    status = page.locator("#status")
    status.get_by_label("Move to").select_option("clarifying")
    status.get_by_label("Note", exact=True).fill("Let us pin it down first.")
    status.get_by_role("button", name="Move", exact=True).click()
    page.locator("#status .chip", has_text="clarifying").wait_for(timeout=5_000)
    assert "Next: Sagan — clarify hypothesis and information gain" in page.locator("#stepper").inner_text()
    assert page.locator("#stepper .stage-current").inner_text().strip() == "Clarifying"
    page.locator("#timeline-list .transition", has_text="proposed → clarifying").wait_for(timeout=1_000)
    assert page.evaluate("window.__neverReloaded === true")
    with app.app_context():
        assert experiments.get_experiment(number).status == "clarifying"
    assert_clean(session)
