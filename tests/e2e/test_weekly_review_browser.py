"""The weekly review in Chromium (SPEC §12.3): the scheduler drafts the demo's week, the owner
edits it on a phone and publishes it (confirming), makes a share link, and a mentor opens the
link in a browser with no cookie — at 390 px, light and dark — and reads the published version
only, as the mentor update.

With SAGAN_SCREENSHOTS_DIR set, the review page and the mentor's view are photographed there
at 390 px and 1280 px, light and dark (docs/screenshots/weekly-review-*.png, mentor-update-*.png)."""
from __future__ import annotations

import os
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import Experiment, db
from services.core import registry
from services.core.actors import Actor
from services.day import daily_log, weekly_review
from services.pipeline import demo
from services.results import results
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll, assert_thumb_sized
from workers import scheduler

pytestmark = pytest.mark.browser

# Links inside the review's sentences are inline text (the target-size rule's own exception for links in
# running text); every control and every other link is checked.
TAP_EXEMPT = ".skip-link, .review-body a"


def _fits(page, viewport) -> None:
    """No sideways scrolling, and on a phone every control thumb-sized."""
    assert_no_sideways_scroll(page)
    if viewport is PHONE:
        assert_thumb_sized(page, TAP_EXEMPT, skip_closed_details=True)


def _scheduled_demo_week(app) -> str:
    """The curated demo, and the scheduler's tick once the review day's hour has passed: the
    review day is set to today, so the week drafted is the demo's."""
    with app.app_context():
        demo.load_curated()
        # The analyzer's clean result on the demo experiment waiting for promotion (the curated
        # demo walks its experiments there without writing one).
        waiting = db.session.scalar(sa.select(Experiment).where(Experiment.status == "awaiting_promotion")
                                    .order_by(Experiment.number).limit(1))
        results.save_clean_result(waiting, "<p>Curriculum ordering changed the final loss by 0.6%.</p>",
                                  Actor("agent", None, "analyzer"),
                                  title="Curriculum ordering changes final loss by <1% (MODERATE confidence)")
        db.session.commit()
        today = daily_log.today()
        weekly_review.save_schedule(registry.WEEKDAYS[today.weekday()], 0)
        db.session.commit()
        assert weekly_review.due_week_end(datetime.combine(today, time(0, 5), tzinfo=timezone.utc)) == today
        scheduler.tick(app)
        review = weekly_review.by_week(today)
        assert review is not None and review.drafted_by == "scheduler"
        return today.isoformat()


def test_a_scheduled_review_is_edited_published_and_read_by_a_mentor(browser_session, owner_account, app):
    week = _scheduled_demo_week(app)
    owner = browser_session(PHONE)
    page = owner.login()
    page.goto("/log")
    page.get_by_role("link", name="Weekly reviews").click()
    page.wait_for_url("**/reviews")
    _fits(page, PHONE)
    page.get_by_role("link", name="This week").click()
    page.wait_for_url(f"**/reviews/{week}")
    _fits(page, PHONE)
    assert "What we learned" in page.locator("#latest").inner_text()
    editor = page.get_by_label("Review text")
    drafted = editor.input_value()
    edited = drafted.replace("## What we learned", "The curriculum result held; the 350M repeat is next.\n\n"
                                                   "## What we learned", 1)
    editor.fill(edited + "\nEdited before publishing: the 350M repeat comes first next week.\n")
    page.get_by_role("button", name="Save as version 2").click()
    page.wait_for_url(f"**/reviews/{week}")
    assert "Version 2" in page.locator("#latest > h2").inner_text()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Publish version 2").click()
    page.wait_for_url(f"**/reviews/{week}#published")
    assert "published v2" in page.content()
    # A later draft does not reach the mentor until it is published.
    page.get_by_label("Review text").fill(edited + "\nAn unpublished afterthought.\n")
    page.get_by_role("button", name="Save as version 3").click()
    page.wait_for_url(f"**/reviews/{week}")
    page.get_by_label("Label").fill("For Dr. Ada")
    page.get_by_role("button", name="Create a share link").click()
    page.wait_for_url(f"**/reviews/{week}#share")
    url = page.locator("#new-share-url").input_value()
    _fits(page, PHONE)
    page.goto(f"/reviews/{date.fromisoformat(week) - timedelta(weeks=100)}")  # a week never reviewed: Draft it
    assert "This week has no review yet" in page.content()
    _fits(page, PHONE)
    assert_clean(owner)

    for scheme in ("light", "dark"):
        mentor = browser_session(PHONE, scheme)
        view = mentor.page
        view.goto(url)
        assert mentor.context.cookies() == []
        _fits(view, PHONE)
        text = view.locator("main").inner_text()
        assert "Research questions" in text and "Established" in text and "Next step" in text
        assert "The curriculum result held" in text and "Edited before publishing" in text
        assert "Curriculum ordering changes final loss by <1%" in text and "MODERATE confidence" in text
        for private in ("unpublished afterthought", "Spend", "Agents: $", "Drafted from the record"):
            assert private not in text, private
        assert view.locator("form").count() == 0
        assert_clean(mentor)

    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            for scheme in ("light", "dark"):
                session = browser_session(viewport, scheme)
                shot = session.login()
                shot.goto(f"/reviews/{week}")
                shot.screenshot(path=str(Path(shots) / f"weekly-review-{name}-{scheme}.png"), full_page=True)
                mentor_page = browser_session(viewport, scheme).page
                mentor_page.goto(url)
                mentor_page.screenshot(path=str(Path(shots) / f"mentor-update-{name}-{scheme}.png"), full_page=True)
