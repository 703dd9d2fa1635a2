"""Ideation in Chromium on a phone (390 px): from a demo clean result, "Ideate" opens the deck;
an answer autosaves without a reload; Claude (the real agent loop against the loopback fake
model, run by an in-process worker) proposes cards that appear while the page polls; one card
is promoted to a `proposed` experiment, whose page says it came from the session."""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from playwright.sync_api import expect

from models import Experiment, db
from services.core.actors import Actor
from services.pipeline import demo
from services.results import results
from tests.e2e.actions import NO_RELOAD_MARK, PHONE, assert_clean, assert_not_reloaded
from tests.e2e.fit import assert_no_sideways_scroll
from tests.fakes.anthropic_server import reply, text, tool_use

RESULT_TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
RESULT_HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
CARD = "Ablate the warm-up length at 125M"


def _demo_clean_result(app) -> int:
    """The curated demo, with its awaiting-promotion experiment's clean result written; its number."""
    with app.app_context():
        demo.load_curated()
        experiment = db.session.scalars(sa.select(Experiment).where(Experiment.status == "awaiting_promotion")
                                        .order_by(Experiment.number)).first()
        results.save_clean_result(experiment, RESULT_HTML, Actor("agent", None, "analyzer"), title=RESULT_TITLE)
        db.session.commit()
        return experiment.number


def test_an_idea_from_a_demo_clean_result_becomes_a_proposed_experiment(browser_session, owner_account, app,
                                                                        fake_anthropic, worker):
    number = _demo_clean_result(app)
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/experiments/{number}")
    page.locator("#clean-result").get_by_role("button", name="Ideate").click()
    page.wait_for_url("**/ideas/*")
    expect(page.locator("#deck")).to_contain_text(f'What assumption behind "{RESULT_TITLE}" would fail first?')
    assert_no_sideways_scroll(page, "the session page")

    # An answer autosaves a moment after typing stops: the saved line says so, no reload.
    page.evaluate(NO_RELOAD_MARK)
    page.locator("#answer-2").fill("The warm-up length was fixed at 2% of steps everywhere.")
    page.locator("#answer-2").press("End")
    expect(page.locator("#answers-state")).to_contain_text("Saved at")
    assert_not_reloaded(page)
    page.reload()
    expect(page.locator("#answer-2")).to_have_value("The warm-up length was fixed at 2% of steps everywhere.")

    # Claude proposes from the answers; the cards panel polls until they are there.
    fake_anthropic.script(
        reply(tool_use("read_ideation_session", {})),
        reply(tool_use("propose_idea_cards", {"cards": [
            {"title": CARD, "body_md": "From answer 2: the warm-up was **never ablated**."},
            {"title": "Ask whether the gap holds at 350M", "body_md": "What a skeptic asks first."}]})),
        reply(text("Two cards proposed.")))
    page.get_by_role("button", name="Ask Claude for ideas").click()
    expect(page.locator("#cards")).to_contain_text("Claude is proposing ideas")
    worker()
    cards = page.locator(".idea-card")
    expect(cards).to_have_count(2, timeout=15_000)
    expect(cards.first).to_contain_text("Claude-proposed")

    # Promote the first card to an experiment: it lands in `proposed` and says where it came from.
    first = page.locator(".idea-card", has_text=CARD)
    first.get_by_label("Promote to").select_option("experiment")
    first.get_by_role("button", name="Promote").click()
    expect(page.locator(".notice")).to_contain_text("Promoted to #")
    first = page.locator(".idea-card", has_text=CARD)
    expect(first.locator(".promoted-to")).to_contain_text(CARD)
    first.locator(".promoted-to a").click()
    page.wait_for_url("**/experiments/*")
    expect(page.locator("h1")).to_contain_text(CARD)
    expect(page.locator("main")).to_contain_text("Ideation on")
    with app.app_context():
        made = db.session.scalar(sa.select(Experiment).where(Experiment.title == CARD))
        assert made.status == "proposed"
    assert_no_sideways_scroll(page, "the promoted experiment")
    assert_clean(session)
