"""Todos in Chromium: a phone and a laptop, the quick add, a status changed in place without a
reload, and "Make it an experiment" landing on the experiment."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from models import db
from models.research import Project
from services.core.actors import Actor
from services.day import todos
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll, assert_thumb_sized

TAP_EXEMPT = ".queue-title, .skip-link, label input[type=checkbox], label input[type=radio]"
OWNER = Actor("owner", None, "Ada")


def _seed(app) -> None:
    with app.app_context():
        project = Project(slug="emergent", title="Emergent misalignment from narrow finetuning")
        db.session.add(project)
        db.session.flush()
        todos.create_todo({"title": "Replicate the insecure-code result with three seeds at the 7B scale, "
                                    "and with the system prompt removed", "priority": "urgent",
                           "intent": "replication", "project": "emergent", "status": "scoped"}, OWNER)
        todos.create_todo({"title": "Cache the tokenizer between pod runs", "intent": "engineering",
                           "assignee_kind": "agent", "status": "open"}, OWNER)
        todos.create_todo({"title": "Read the sleeper agents paper again"}, OWNER)
        db.session.commit()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "laptop"])
def test_todo_pages_fit_and_work(browser_session, owner_account, app, viewport):
    """Do /todos and a todo's page fit the width with thumb-sized controls on a phone; does the
    quick add land in the inbox, a status change move the todo without a reload, and "Make it an
    experiment" land on the new experiment?"""
    _seed(app)
    session = browser_session(viewport)
    page = session.login()
    shots = os.environ.get("SAGAN_TODO_SHOTS")
    for path in ["/todos", "/todos/1", "/todos?status=blocked"]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        if shots:
            name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "-")
            page.screenshot(path=f"{shots}/{name}-{viewport['width']}.png", full_page=True)
        assert_no_sideways_scroll(page, path)
        if viewport is PHONE:
            assert_thumb_sized(page, TAP_EXEMPT, path, skip_closed_details=True)
    page.goto("/todos")
    page.get_by_label("New todo").fill("Ask the mentor about the eval")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#todo-group-inbox + ul .queue-item")).to_have_count(2)
    page.evaluate("window.__notReloaded = true")
    page.get_by_label("Status of T3").select_option("blocked")
    expect(page.locator("#todo-group-blocked + ul .queue-item")).to_have_count(1)
    assert "sleeper agents" in page.locator("#todo-group-blocked + ul").inner_text()
    assert page.evaluate("window.__notReloaded") is True
    if shots:
        page.screenshot(path=f"{shots}/todos-after-{viewport['width']}.png", full_page=True)
    page.goto("/todos/1")
    page.get_by_role("button", name="Make it an experiment").click()
    page.wait_for_url("**/experiments/*")
    assert "Replicate the insecure-code result" in page.locator("h1").inner_text()
    page.goto("/todos/1")
    expect(page.locator("#experiment")).to_contain_text("This todo became")
    if shots:
        page.screenshot(path=f"{shots}/todo-with-experiment-{viewport['width']}.png", full_page=True)
    assert_clean(session)
