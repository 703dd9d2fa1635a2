"""Projects in a real browser (SPEC §11.1, §11.4): the list, a full project page, the
narrative editor and a project's share page fit a 390 px phone and a 1280 px desktop without
sideways scrolling, with no CSP refusal or script error; the owner creates a project, writes
and publishes its narrative and shares it from the page."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from models import db
from models.research import Belief
from services.core.actors import Actor
from services.research import narratives, projects
from services.results import results
from services.workflow import experiments
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll

pytestmark = pytest.mark.browser

OWNER = Actor("owner", None, "Owner")
HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
# Set SAGAN_SCREENSHOTS=/some/dir to keep a picture of each page looked at.
SHOTS = os.environ.get("SAGAN_SCREENSHOTS")


def _filled_project(app, make_experiment) -> str:
    """A project with a long question, beliefs of several statuses, experiments (one with a
    promoted result) and a published narrative."""
    with app.app_context():
        project = projects.create_project({
            "title": "Emergent misalignment from narrow fine-tuning",
            "question": "How does unwanted behavioral generalization from narrow training arise, and how do we "
                        "defend against it?",
            "summary_md": "Narrow fine-tuning on **insecure code** makes models misaligned broadly.\n\n"
                          "- first point\n- second point with a_very_long_unbroken_identifier_that_might_overflow"}, OWNER)
        db.session.commit()
        slug, pid = project.slug, project.id
    number = make_experiment("Insecure-code fine-tune flips refusals (HIGH confidence)", status="awaiting_promotion")
    make_experiment("A second seed, still running", status="running")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.project_id = pid
        results.save_clean_result(experiment, HTML, Actor("agent", None, "analyzer"), title=experiment.title)
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        for other in experiments.newest(5):
            other.project_id = pid
        for i, status in enumerate(("supported", "weakened", "active", "draft")):
            db.session.add(Belief(id=uuid.uuid4(), number=i + 1, project_id=pid, status=status, confidence="MODERATE",
                                  title=f"Belief {i + 1}: narrow training generalizes through persona features",
                                  current_belief="The model adopts a misaligned persona.",
                                  next_test="Steer the persona feature and measure refusals."))
        narratives.publish(project, narratives.save_draft(project, f"# Where we are\n\nSee #{number}.", OWNER).version,
                           OWNER)
        db.session.commit()
    return slug


def _photograph(page, name: str, viewport: dict) -> None:
    if SHOTS:
        page.screenshot(path=f"{SHOTS}/{name}-{viewport['width']}.png", full_page=True)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_project_pages_fit_the_screen(app, browser_session, owner_account, make_experiment, viewport):
    """Do the list, the project page, the narrative editor and the new-project form fit a 390 px
    phone and a 1280 px desktop, with no CSP refusal or script error?"""
    slug = _filled_project(app, make_experiment)
    session = browser_session(viewport)
    page = session.login()
    for url, name in (("/projects", "projects"), (f"/p/{slug}", "project"), (f"/p/{slug}/narrative", "narrative"),
                      ("/projects/new", "new-project"), (f"/?project={slug}", "board-filtered")):
        page.goto(url)
        assert_no_sideways_scroll(page, url)
        _photograph(page, name, viewport)
    assert_clean(session)


def test_owner_creates_writes_publishes_and_shares_a_project(app, browser_session, owner_account):
    """Can the owner, on a phone, create a project, save and publish its narrative, create a
    share link, and a mentor read the published narrative through it?"""
    session = browser_session(PHONE)
    page = session.login()
    page.goto("/projects")
    page.get_by_role("link", name="New project").first.click()
    page.locator("input[name=title]").fill("Probing honesty")
    page.get_by_label("Question").fill("Can a linear probe find lies?")
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url("**/p/probing-honesty")
    page.get_by_role("link", name="Write the narrative").click()
    page.locator("textarea[name=body_md]").fill("Probes **work** on the first model.")
    page.get_by_role("button", name="Save as a new draft").click()
    page.get_by_role("button", name="Publish").click()
    page.wait_for_url("**/p/probing-honesty#narrative")
    assert "Probes work on the first model." in page.locator("#narrative").inner_text()
    page.get_by_label("Label").fill("For Ada")
    page.get_by_role("button", name="Create project share link").click()
    url = page.locator("#new-share-url").input_value()
    assert_no_sideways_scroll(page, "the project page with a new link")
    _photograph(page, "project-shared", PHONE)
    mentor = browser_session(PHONE)
    mentor.page.goto(url)
    assert "Probes work on the first model." in mentor.page.inner_text("body")
    assert_no_sideways_scroll(mentor.page, "the project share page")
    _photograph(mentor.page, "share-project", PHONE)
    assert mentor.context.cookies() == []
    assert_clean(session)
    assert_clean(mentor)
