"""Metric charts with values a chart cannot draw, in a real browser: the owner's page and the
mentor's share page draw every chart (uPlot), mark the non-finite points and say how many,
with no script error — the largest doubles once made the data a 500 (PostgreSQL) or
`Infinity`, which JSON.parse refuses (SQLite)."""
from __future__ import annotations

import pytest

from tests.e2e.actions import PHONE, assert_clean
from tests.integration.test_metric_extremes import ATTACK, _experiment_with_pods, _share_promoted, post_batch

pytestmark = pytest.mark.browser


def test_charts_mark_non_finite_points_for_owner_and_mentor(app, client, browser_session, owner_account):
    """Two runs post the largest doubles, ±1e300 and a NaN: both pages draw the loss chart,
    with the × note under it, and the compare page too."""
    with app.app_context():
        number, pods = _experiment_with_pods("Diverged in the browser")
    for index, (_pod_id, secret) in enumerate(pods):
        points = ATTACK + [{"step": 3, "name": "loss", "value": (-1) ** index * 1e300}]
        assert post_batch(client, secret, {"seq": 1, "points": points}).status_code == 200
        assert post_batch(client, secret, b'{"seq": 2, "points": [{"step": 4, "name": "loss", "value": NaN}]}'
                          ).status_code == 200
    with app.app_context():
        token = _share_promoted(number)

    owner = browser_session(PHONE)
    page = owner.login()
    page.goto(f"/experiments/{number}")
    chart = page.locator("[data-metric-chart]").first
    chart.locator("canvas").wait_for()
    assert chart.locator(".metric-non-finite").inner_text() == "× 8 values not finite (NaN or ±∞), not drawn"
    assert "latest not finite" in chart.locator(".metric-caption").inner_text()
    page.goto(f"/experiments/compare?e={number}")
    page.locator("[data-metric-chart] canvas").first.wait_for()
    assert_clean(owner)

    mentor = browser_session(PHONE)
    mentor.page.goto(f"/s/{token}")
    shared = mentor.page.locator("[data-metric-chart]").first
    shared.locator("canvas").wait_for()
    assert shared.locator(".metric-non-finite").inner_text() == "× 8 values not finite (NaN or ±∞), not drawn"
    assert_clean(mentor)
