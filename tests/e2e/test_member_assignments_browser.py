"""What waits on a member and reviews shown to mentors, in Chromium (SPEC §13):
the owner assigns a todo to a collaborator on the todo page; the collaborator finds it first on
their home page and marks it done (after a confirmation); the owner shows a published weekly
review to mentor accounts (after a confirmation) and a mentor reads it without its spend. At 390
and 1280 px, light and dark."""
from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa
from playwright.sync_api import expect

from models import Project, Todo, User, db
from services.core import members
from services.core.actors import Actor
from services.day import todos, weekly_review
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll

PASSWORD = "member-password-1"
OWNER = Actor("owner", None, "Owner")
WEEK = date(2026, 11, 29)


def _photograph(page, name: str) -> None:
    """With SAGAN_SCREENSHOTS_DIR set (docs/screenshots/README.md), keep what each one sees."""
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name), full_page=True)


def _member(app, email: str, name: str, role: str, project_id) -> None:
    with app.app_context():
        owner = db.session.scalar(sa.select(User).where(User.role == "owner"))
        _invitation, token = members.invite(owner, email, role, [str(project_id)])
        db.session.commit()
        members.accept(token, name, PASSWORD, PASSWORD)
        db.session.commit()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_assign_finish_and_show_a_review_to_mentors(app, browser_session, owner_account, viewport, scheme):
    with app.app_context():
        project = Project(slug="emergent", title="Emergent misalignment from narrow finetuning")
        db.session.add(project)
        db.session.flush()
        todo = todos.create_todo({"title": "Rerun the 7B transfer eval with the fixed tokenizer",
                                  "priority": "high", "body_md": "The eval harness now pads on the left."}, OWNER)
        todo.project_id = project.id
        review, _ = weekly_review.draft(WEEK, "owner")
        version = weekly_review.save_version(
            review, "# Week\n\nInsecure-code finetuning transferred to 7B (#1).\n\n## Spend\n\n$412 on GPUs.\n", OWNER)
        weekly_review.publish(review, version.version, OWNER)
        db.session.commit()
        number, project_id = todo.number, project.id
    _member(app, "grace@example.org", "Grace", "collaborator", project_id)
    _member(app, "mentor@example.org", "Prof. Lee", "mentor", project_id)
    suffix = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"

    owner = browser_session(viewport, scheme)
    page = owner.login()
    page.goto(f"/todos/{number}")
    panel = page.locator("#assign")
    panel.get_by_label("Assign to").select_option(label="Grace")
    panel.get_by_role("button", name="Save").click()
    expect(page.locator(".assigned-member")).to_have_text("Grace")
    assert_no_sideways_scroll(page, "the todo page")
    _photograph(page, f"member-assign-todo-{suffix}.png")

    grace = browser_session(viewport, scheme)
    home = grace.login("grace@example.org", PASSWORD)
    home.goto("/welcome")
    waiting = home.locator("#waiting")
    expect(waiting).to_contain_text("Rerun the 7B transfer eval")
    expect(waiting).to_contain_text("Emergent misalignment")
    assert_no_sideways_scroll(home, "the member's home")
    _photograph(home, f"member-waiting-on-you-{suffix}.png")
    waiting.get_by_role("link", name="Rerun the 7B transfer eval", exact=False).click()
    expect(home.locator("h1")).to_contain_text("Rerun the 7B transfer eval")
    expect(home.locator("#body")).to_contain_text("pads on the left")
    assert_no_sideways_scroll(home, "the assigned todo")
    home.once("dialog", lambda dialog: dialog.dismiss())  # a second thought: nothing changes
    home.get_by_role("button", name="Mark done").click()
    with app.app_context():
        assert db.session.scalar(sa.select(Todo.status).where(Todo.number == number)) == "inbox"
    home.once("dialog", lambda dialog: dialog.accept())
    home.get_by_role("button", name="Mark done").click()
    expect(home.locator("#waiting")).to_contain_text("Nothing waits on you")
    with app.app_context():
        assert db.session.scalar(sa.select(Todo.status).where(Todo.number == number)) == "done"

    page.goto(f"/reviews/{WEEK.isoformat()}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#mentors").get_by_role("button", name="Show to mentor accounts").click()
    expect(page.locator("#mentors")).to_contain_text("Shown: every mentor account reads version")

    lee = browser_session(viewport, scheme)
    mentor = lee.login("mentor@example.org", PASSWORD)
    mentor.goto("/welcome")
    mentor.locator("#reviews").get_by_role("link", name="Week ending", exact=False).click()
    expect(mentor.locator("#review")).to_contain_text("transferred to 7B (#1)")
    assert "$412" not in mentor.content()
    assert_no_sideways_scroll(mentor, "the mentor's weekly update")
    _photograph(mentor, f"member-mentor-review-{suffix}.png")
    for session in (owner, grace, lee):
        assert_clean(session)
