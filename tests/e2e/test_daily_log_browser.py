"""The daily log in Chromium: a phone and a laptop, the list, a day's entry and an empty day,
and the date picker."""
from __future__ import annotations

from datetime import date, timedelta

import pytest

from models import db
from services.core.actors import Actor
from services.day import daily_log
from services.research import beliefs, literature
from services.results import results
from services.workflow import experiments
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll, assert_thumb_sized

TAP_EXEMPT = ".skip-link"  # the whole page, the nav included, as the other pages are checked


def _seed(app, make_experiment) -> str:
    number = make_experiment("Does the warmup length drive the loss spike at step 4k?", status="running")
    with app.app_context():
        owner = Actor("owner", None, "Ada")
        results.save_clean_result(experiments.get_experiment(number), "<p>It does.</p>", owner,
                                  title="Warmup length drives the spike (MODERATE confidence)")
        beliefs.create_belief({"title": "Longer warmup removes the step-4k spike"}, owner)
        literature.add({"title": "On the stability of Adam with long warmup schedules in large models",
                        "authors": ["Liu, Liyuan"], "year": 2020})
        day = daily_log.write(daily_log.today(), "owner").day
        db.session.commit()
        return day.isoformat()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "laptop"])
def test_log_pages_fit_and_work(browser_session, owner_account, app, make_experiment, viewport):
    """Do /log, a day's entry and an empty day fit the width with thumb-sized controls on a
    phone, and does the date picker go to the day picked?"""
    today = _seed(app, make_experiment)
    earlier = (date.fromisoformat(today) - timedelta(days=5)).isoformat()
    session = browser_session(viewport)
    page = session.login()
    for path in ["/log", f"/log/{today}", f"/log/{earlier}"]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert_no_sideways_scroll(page, path)
        if viewport is PHONE:
            assert_thumb_sized(page, TAP_EXEMPT, path, skip_closed_details=True)
    page.goto(f"/log/{today}")
    assert "Warmup length drives the spike" in page.locator("#log-results").inner_text()
    page.get_by_label("Go to a day").fill(earlier)
    page.get_by_role("button", name="Show").click()
    page.wait_for_url(f"**/log/{earlier}")
    assert "No entry for this day" in page.content()
    assert_clean(session)
