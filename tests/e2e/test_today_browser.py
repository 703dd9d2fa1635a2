"""Today in Chromium at 390 px: the owner opens Today, approves a
plan, defers another, accepts a belief update and answers a question from the queue; each
leaves Today's queue in place (no reload) and shows its effect on the item's own page."""
from __future__ import annotations

import os

import sqlalchemy as sa
from playwright.sync_api import expect

from models import ApprovalRequest, Experiment, db
from services.core.actors import Actor
from services.pipeline import demo
from services.research import beliefs
from services.workflow import experiments
from tests.e2e.actions import DESKTOP, NO_RELOAD_MARK, PHONE, assert_clean, assert_not_reloaded
from tests.e2e.fit import assert_no_sideways_scroll, assert_thumb_sized

OWNER = Actor("owner", None, "Ada")
TAP_EXEMPT = ".skip-link, label input[type=checkbox], label input[type=radio]"


def _seed(app) -> dict:
    with app.app_context():
        made = {}
        for name, title, status, priority in (
                ("approve", "Seed variance of the probe at layer 12", "plan_pending", "urgent"),
                ("defer", "Warmup length vs the loss spike at step 4k", "plan_pending", "normal"),
                ("question", "Do attention sinks survive fine-tuning at 8k context?", "awaiting_clarifications",
                 "normal")):
            experiment = experiments.create_experiment({"title": title, "priority": priority}, OWNER)
            demo.walk_to(experiment, status)
            made[name] = experiment.number
        belief = beliefs.create_belief({"title": "Narrow finetuning generalizes to broad misalignment",
                                        "status": "active", "current_belief": "Probably, at 7B."}, OWNER)
        proposal = beliefs.propose_update(belief, None, None, status="supported", confidence="MODERATE",
                                          text="It holds over three seeds at 7B.", evidence="3 of 3 seeds.",
                                          reasoning="The effect held in every seed.")
        db.session.commit()
        made["belief"], made["proposal"] = belief.number, str(proposal.id)
        for name in ("approve", "defer"):
            made[f"{name}_request"] = str(db.session.scalar(
                sa.select(ApprovalRequest.id).join(Experiment, Experiment.id == ApprovalRequest.experiment_id)
                .where(Experiment.number == made[name])))
        return made


def test_owner_clears_the_queue_from_a_phone(browser_session, owner_account, app):
    made = _seed(app)
    session = browser_session(PHONE)
    page = session.login()
    assert page.url == session.context.pages[0].url and page.url.endswith("/")  # landed on Today
    expect(page.locator("h1")).to_contain_text("Today")
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=f"{shots}/today-queue-phone-light.png", full_page=True)
    assert_no_sideways_scroll(page, "Today")
    assert_thumb_sized(page, TAP_EXEMPT, "Today")
    page.evaluate(NO_RELOAD_MARK)

    # Approve the urgent plan (its checklist is not ticked: the approval page's guard asks first).
    row = page.locator(f"#need-plan-{made['approve_request']}")
    confirm = row.get_by_label("not ticked")
    if confirm.count():
        row.get_by_role("button", name="Approve").click()
        expect(page.locator(f"#need-plan-{made['approve_request']} .need-message")).to_contain_text("not ticked")
        page.locator(f"#need-plan-{made['approve_request']}").get_by_label("not ticked").check()
    page.locator(f"#need-plan-{made['approve_request']}").get_by_role("button", name="Approve").click()
    expect(page.locator(f"#need-plan-{made['approve_request']}")).to_contain_text(f"Approved: #{made['approve']}")

    # Defer the other plan, with a note.
    row = page.locator(f"#need-plan-{made['defer_request']}")
    row.get_by_label(f"Note for #{made['defer']}").fill("After the deadline")
    row.get_by_role("button", name="Defer").click()
    expect(page.locator(f"#need-plan-{made['defer_request']}")).to_contain_text("Deferred")

    # Accept the belief update.
    row = page.locator(f"#need-belief_update-{made['proposal']}")
    row.get_by_role("button", name="Accept").click()
    expect(page.locator(f"#need-belief_update-{made['proposal']}")).to_contain_text("Accepted")

    # Answer the planner's questions.
    row = page.locator(f"#need-question-{made['question']}")
    boxes = row.locator("textarea")
    assert boxes.count() >= 1
    boxes.nth(0).fill("The instruction-tuned checkpoint.")
    row.get_by_role("button", name="Send answers").click()
    expect(page.locator(f"#need-question-{made['question']}")).to_contain_text("Answered")
    assert_not_reloaded(page)
    if shots:
        page.screenshot(path=f"{shots}/today-after-actions-phone-light.png", full_page=True)

    # Each effect, on the item's own page.
    page.goto(f"/experiments/{made['approve']}")
    expect(page.locator("body")).to_contain_text("Plan approved")
    page.goto("/approvals")  # the approval queue: the deferred plan last, with its note
    expect(page.locator(".queue-item.deferred")).to_contain_text("After the deadline")
    page.goto(f"/beliefs/{made['belief']}")
    expect(page.locator("body")).to_contain_text("It holds over three seeds at 7B.")
    expect(page.locator("body")).to_contain_text("supported")
    page.goto(f"/experiments/{made['question']}")
    expect(page.locator("body")).to_contain_text("The instruction-tuned checkpoint.")

    # Back on Today, the approved plan, the accepted update and the answered question are gone;
    # the deferred plan waits at the end of the queue.
    page.goto("/")
    queue = page.locator(".today-queue")
    expect(queue.locator(f"#need-plan-{made['approve_request']}")).to_have_count(0)
    expect(queue.locator(f"#need-belief_update-{made['proposal']}")).to_have_count(0)
    expect(queue.locator(f"#need-question-{made['question']}")).to_have_count(0)
    expect(queue.locator(f"#need-plan-{made['defer_request']}")).to_contain_text("deferred")
    assert_clean(session)


def test_today_refreshes_itself(browser_session, owner_account, app, fast_board_poll):
    """A laptop left on Today: a belief update Claude proposes meanwhile appears in the queue
    by the poll, without a reload; with nothing new the poll swaps nothing (304)."""
    session = browser_session(DESKTOP)
    page = session.login()
    expect(page.locator("#needs-title")).to_contain_text("Needs you")
    page.evaluate(NO_RELOAD_MARK)
    statuses = []
    page.on("response", lambda r: statuses.append(r.status) if r.url.endswith("/today/live") else None)
    page.wait_for_timeout(2_500)
    assert statuses and set(statuses) == {304}, statuses
    with app.app_context():
        belief = beliefs.create_belief({"title": "Sinks survive fine-tuning", "status": "active"}, OWNER)
        beliefs.propose_update(belief, None, None, status="weakened", confidence="LOW", text="Not at 8k.",
                               evidence="One run.", reasoning="The sink vanished at 8k.")
        db.session.commit()
    expect(page.locator(".today-queue")).to_contain_text("Sinks survive fine-tuning", timeout=10_000)
    expect(page.locator("#your-turn")).to_contain_text("Your turn (1)")
    assert_not_reloaded(page)
    assert_clean(session)


def test_an_idea_claude_proposes_appears_in_next_and_opens_its_card(browser_session, owner_account, app,
                                                                     fast_board_poll):
    """On a phone left on Today, a card Claude proposes meanwhile appears in "Next" by the
    poll, without a reload; tapping it opens its session at that card."""
    from services.planning import ideation
    with app.app_context():
        belief = beliefs.create_belief({"title": "Curricula barely matter at 125M", "status": "active"}, OWNER)
        session_number = ideation.start_session("belief", belief.id, OWNER).number
        db.session.commit()
    session = browser_session(PHONE)
    page = session.login()
    expect(page.locator("#next-title")).to_be_visible()
    page.evaluate(NO_RELOAD_MARK)
    with app.app_context():
        card = ideation.add_card(ideation.get_session(session_number), "Reverse the curriculum as a control",
                                 "If hard-to-easy matches, order is not what moves the loss.", origin="claude")
        db.session.commit()
        card_id = str(card.id)
    idea = page.locator(f"#idea-{card_id}")
    expect(idea).to_contain_text("Reverse the curriculum as a control", timeout=10_000)
    expect(idea).to_contain_text(f"I{session_number}")
    assert_not_reloaded(page)
    idea.get_by_role("link", name="Reverse the curriculum as a control").click()
    page.wait_for_url(f"**/ideas/{session_number}#card-{card_id}")
    expect(page.locator(f"#card-{card_id}")).to_contain_text("Claude-proposed")
    assert_clean(session)
