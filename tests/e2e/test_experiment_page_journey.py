"""The experiment page through the demo journey: one browser tab keeps the
experiment page open from `clarifying` to `awaiting_promotion` and sees every panel update in
place without a reload, while another tab does the journey's forms and reloads after each one —
and nothing happens twice. The same real stack as tests/e2e/test_journey.py: PostgreSQL, Redis,
a real worker process with the scheduler, the scripted agents, two real local pods.

With SAGAN_SCREENSHOTS_DIR set, the finished page is photographed there at 390 px and 1280 px,
light and dark (docs/screenshots/experiment-finished-*.png)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, Experiment, PlanVersion, WorkflowEvent, db
from tests.e2e.actions import DESKTOP, PHONE, move_card, open_board
from tests.e2e.test_journey import HAPPY_STATUSES, _wait_for, journey_stack  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = 240_000  # ms: the whole journey under a loaded machine


def _moves(app, number: int) -> list[str]:
    with app.app_context():
        db.session.remove()
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        return [e.to_status for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at))]


def _count(app, model, *where) -> int:
    with app.app_context():
        db.session.remove()
        return db.session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


def test_the_open_page_follows_the_journey_and_reloads_repeat_nothing(app, browser_session, owner_account,
                                                                      journey_stack, monkeypatch):  # noqa: F811
    monkeypatch.setitem(app.config, "POLL_EXPERIMENT_SECONDS", 1)
    desk = browser_session()
    actor = open_board(desk)
    actor.get_by_role("link", name="New experiment").click()
    actor.get_by_label("Title").fill("Do two seeds of the probe agree?")
    actor.get_by_role("button", name="Create").click()
    actor.wait_for_url(re.compile(r"/experiments/\d+$"))
    actor.wait_for_load_state()
    number = int(re.search(r"/experiments/(\d+)", actor.url).group(1))
    actor.reload()  # the page the create redirected to: a GET, nothing is created again
    assert _count(app, Experiment, Experiment.title == "Do two seeds of the probe agree?") == 1
    actor.goto("/board")
    move_card(actor, number, "clarifying")
    actor.reload()

    # The watched page: a window of its own (a background tab would be hidden, and a hidden
    # page rightly holds its poll back), opened once and never reloaded (the marker would go).
    watched = browser_session().login()
    watched.goto(f"/experiments/{number}")
    watched.evaluate("window.__neverReloaded = true")
    stepper = watched.locator("#stepper")
    watched.locator("#stepper .stage-current", has_text="Clarifying").wait_for()

    # Sagan asks: the questions appear on the open page by themselves.
    watched.get_by_label("How many seeds should the demo run?").wait_for(timeout=LONG)
    assert "Next: You" in stepper.inner_text()

    actor.goto(f"/experiments/{number}")
    actor.get_by_label("How many seeds should the demo run?").fill("Two.")
    actor.get_by_label("Which metric matters most?").fill("Accuracy.")
    actor.get_by_role("button", name="Send answers to the planner").click()
    actor.wait_for_url(re.compile(rf"/experiments/{number}"))
    actor.reload()

    # The answers, the plan and its approval request arrive on the open page.
    watched.locator("#answered-questions", has_text="Two.").wait_for(timeout=LONG)
    watched.locator("#stepper .stage-current", has_text="Awaiting approval").wait_for(timeout=LONG)
    watched.locator("#fold-plan summary", has_text="v1").wait_for(timeout=LONG)
    watched.locator("#approvals .approval-list li").first.wait_for(timeout=LONG)

    phone = browser_session(PHONE)
    mobile = phone.login()
    mobile.goto("/approvals")
    mobile.locator(".queue-item a").first.click()
    mobile.get_by_label("Anything else").fill("Keep it small.")
    mobile.get_by_role("button", name="Approve", exact=True).click()
    # The confirmation opens at its box, under the thumb, not 2,000 px below.
    mobile.locator("#confirm-unchecked").wait_for()
    assert mobile.url.endswith("#confirm-unchecked")
    top = mobile.locator("#approve-anyway").evaluate("b => b.getBoundingClientRect().top")
    assert 0 <= top < PHONE["height"], top
    mobile.reload()  # the refusal page again: a GET, still pending, nothing approved
    with app.app_context():
        assert _count(app, ApprovalRequest, ApprovalRequest.status == "approved") == 0
    mobile.goto("/approvals")
    mobile.locator(".queue-item a").first.click()
    mobile.get_by_role("button", name="Approve", exact=True).click()
    mobile.get_by_role("button", name="Approve anyway").click()
    mobile.get_by_text("This request is").wait_for()
    mobile.reload()

    # Runs, pods and the timeline fill in while the page stays open.
    watched.locator("#runs .run-list li").nth(2).wait_for(state="attached", timeout=LONG)
    watched.locator("#pods .pod-card").nth(1).wait_for(state="attached", timeout=LONG)
    watched.locator("#timeline-list .event-folded, #timeline-list .event-progress").first.wait_for(
        state="attached", timeout=LONG)
    watched.locator("#stepper .stage-current", has_text="Awaiting promotion").wait_for(timeout=LONG)
    _wait_for(app, number, {"awaiting_promotion"}, seconds=30)
    # The result first: the clean result and its frame are on the page, the work folded below.
    watched.locator("#clean-result iframe[data-result-frame]").first.wait_for(timeout=LONG)
    assert watched.evaluate("document.getElementById('clean-result').getBoundingClientRect().top"
                            " < document.getElementById('fold-plan').getBoundingClientRect().top")
    assert watched.locator("#pods .pod-card", has_text="100%").count() == 2  # the exit post counted
    assert watched.evaluate("window.__neverReloaded === true")
    assert "differs from the approved plan" not in watched.content()

    # Promote, reload, and the journey's record shows every step once.
    actor.goto(f"/experiments/{number}")
    actor.get_by_role("button", name=re.compile("Promote", re.I)).first.click()
    _wait_for(app, number, {"shared", "completed"})
    actor.reload()
    assert _moves(app, number) == HAPPY_STATUSES[1:]
    with app.app_context():
        experiment_id = db.session.scalar(sa.select(Experiment.id).where(Experiment.number == number))
    assert _count(app, PlanVersion, PlanVersion.experiment_id == experiment_id) == 1
    assert _count(app, AgentRun, AgentRun.scope_id == experiment_id, AgentRun.agent == "experiment-orchestrator") == 1
    assert _count(app, WorkflowEvent, WorkflowEvent.entity_id == experiment_id,
                  WorkflowEvent.marker == "epm:clarify-answers") == 1
    assert _count(app, WorkflowEvent, WorkflowEvent.entity_id == experiment_id,
                  WorkflowEvent.marker == "epm:promoted") == 1

    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            for scheme in ("light", "dark"):
                session = browser_session(viewport, color_scheme=scheme)
                page = session.login()
                page.goto(f"/experiments/{number}")
                page.locator("#clean-result iframe[data-result-frame]").first.wait_for()
                page.wait_for_function("() => document.querySelector('iframe[data-result-frame]').clientHeight > 150")
                page.screenshot(path=str(Path(shots) / f"experiment-finished-{name}-{scheme}.png"), full_page=True)
