"""Sharing one experiment's agent logs, in Chromium (SPEC §13): the owner confirms "Share agent
logs with collaborators" in the experiment's runs section; the project's collaborator finds
the run on their experiment page and reads its transcript, read-only; the owner stops sharing
and the run answers the collaborator 404. At 390 and 1280 px, light and dark."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from playwright.sync_api import expect

from models import Experiment, Project, db
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll
from tests.integration.members_fixtures import MEMBER_PASSWORD, invite
from tests.integration.test_run_pages import add_events, make_run


def _photograph(target, name: str) -> None:
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        target.screenshot(path=str(Path(shots) / name))


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_owner_shares_and_unshares_an_experiments_agent_logs(app, browser_session, owner_account,
                                                                  make_experiment, viewport, scheme):
    number = make_experiment("Does the curriculum flag reach the loader?", status="proposed")
    with app.app_context():
        project = Project(slug="emergent", title="Emergent misalignment from narrow finetuning")
        db.session.add(project)
        db.session.flush()
        db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(project_id=project.id))
        db.session.commit()
        project_id = str(project.id)
    run_id = make_run(app, number, status="completed")
    add_events(app, run_id, ("assistant_text", "Reading the loader to find where the ordering flag is read. " * 4),
               ("tool_call", "read_file(path='train.py')"))
    size = "phone" if viewport is PHONE else "desktop"

    owner = browser_session(viewport, color_scheme=scheme)
    page = owner.login()
    page.goto(f"/experiments/{number}")
    page.evaluate("document.querySelectorAll('details.fold').forEach(fold => fold.open = true)")
    runs = page.locator("#runs")
    expect(runs).to_contain_text("Only you see these runs.")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    runs.get_by_role("button", name="Share agent logs with collaborators").click()
    expect(page.locator("#runs")).to_contain_text("Shared with this project's collaborators, read-only.")
    assert asked and "read every run's transcript" in asked[0]
    assert_no_sideways_scroll(page, "the owner's experiment page")
    page.evaluate("document.querySelectorAll('details.fold').forEach(fold => fold.open = true);"
                  "document.querySelector('.topbar').style.position = 'static'")  # not over the section
    _photograph(page.locator("#runs"), f"agent-logs-shared-owner-{size}-{scheme}.png")

    token = invite(app, "grace@example.org", "collaborator", [project_id])
    member = browser_session(viewport, color_scheme=scheme)
    reading = member.page
    reading.goto(f"/join/{token}")
    reading.get_by_label("Password", exact=False).first.fill(MEMBER_PASSWORD)
    reading.get_by_label("Password again").fill(MEMBER_PASSWORD)
    reading.get_by_role("button", name="Create my account").click()
    reading.wait_for_url("**/welcome")
    reading.goto(f"/m/emergent/experiments/{number}")
    reading.locator("#runs").get_by_role("link", name="Run").first.click()
    expect(reading.locator("#transcript")).to_contain_text("where the ordering flag is read")
    expect(reading.locator("#transcript")).to_contain_text("read_file(path='train.py')")
    assert reading.locator("main form, #transcript form").count() == 0  # read-only: no cancel, no classify
    assert_no_sideways_scroll(reading, "the member's run page")
    _photograph(reading, f"agent-logs-member-run-{size}-{scheme}.png")
    run_url = reading.url

    page.goto(f"/experiments/{number}")
    page.evaluate("document.querySelectorAll('details.fold').forEach(fold => fold.open = true)")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#runs").get_by_role("button", name="Stop sharing agent logs").click()
    expect(page.locator("#runs")).to_contain_text("Only you see these runs.")
    assert reading.goto(run_url).status == 404
    reading.goto(f"/m/emergent/experiments/{number}")
    expect(reading.locator("#runs")).to_have_count(0)
    assert_clean(owner)
    assert_clean(member)
