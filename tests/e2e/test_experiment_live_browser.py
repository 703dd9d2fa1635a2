"""The experiment page updates itself in a real browser: panels change in place
after the data changes, nothing reloads, and a poll is held back while the owner types."""
from __future__ import annotations

import pytest

from models import db
from services.core import events
from services.core.actors import Actor
from services.planning import questions
from services.workflow import experiments

pytestmark = pytest.mark.browser

AGENT = Actor("agent", "run", "planner")


@pytest.fixture
def fast_page_poll(app, monkeypatch):
    monkeypatch.setitem(app.config, "POLL_EXPERIMENT_SECONDS", 1)


def test_questions_and_events_appear_without_a_reload(app, browser_session, owner_account, make_experiment,
                                                     fast_page_poll):
    number = make_experiment("Vague", status="clarifying")
    session = browser_session()
    page = session.login()
    page.goto(f"/experiments/{number}")
    page.evaluate("window.__neverReloaded = true")
    page.locator("#stepper .stage-current", has_text="Clarifying").wait_for()
    with app.app_context():
        questions.ask(experiments.get_experiment(number), [{"key": "seeds", "text": "How many seeds?"}], AGENT)
        db.session.commit()
    page.get_by_label("How many seeds?").wait_for(timeout=15_000)
    assert "Next: You" in page.locator("#stepper").inner_text()
    assert page.locator("#status .chip", has_text="awaiting clarifications").count() == 1
    assert page.evaluate("window.__neverReloaded === true")


def test_a_poll_waits_while_the_owner_types(app, browser_session, owner_account, make_experiment, fast_page_poll):
    """Typing an answer: a change elsewhere must not replace the form under the owner's fingers;
    once the field is left, the page catches up."""
    number = make_experiment("Vague", status="clarifying")
    with app.app_context():
        questions.ask(experiments.get_experiment(number), [{"key": "seeds", "text": "How many seeds?"}], AGENT)
        db.session.commit()
    session = browser_session()
    page = session.login()
    page.goto(f"/experiments/{number}")
    box = page.get_by_label("How many seeds?")
    box.fill("Two, and")
    with app.app_context():
        events.record(experiments.get_experiment(number), "note", Actor("system", None, "t"), note="Meanwhile.")
        db.session.commit()
    page.wait_for_timeout(2500)  # two poll intervals: a poll would have swapped the form by now
    assert box.input_value() == "Two, and"
    assert page.locator("#timeline-list", has_text="Meanwhile.").count() == 0
