"""Runs grouped by configuration in a real browser: the compare view of the demo's two factor
screens, grouped by seed, draws one mean line with its spread per seed (the runs faint
behind), and switching the Group by choice regroups every chart."""
from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from models import Experiment, db
from services.pipeline import demo
from tests.e2e.actions import DESKTOP, assert_clean

pytestmark = pytest.mark.browser


def _screens(app) -> list[int]:
    """Load the curated demo; the numbers of its two seeded screens."""
    with app.app_context():
        demo.load_curated()
        return list(db.session.scalars(sa.select(Experiment.number).where(
            Experiment.status.in_(("interpreting", "awaiting_promotion"))).order_by(Experiment.number)))


def test_the_compare_view_groups_the_demos_runs_by_seed(app, browser_session, owner_account):
    """Does `?group=seed` draw three groups (seed 0, 1, 2 — four runs each over the two
    experiments) with a mean line each, and does choosing "condition"-like keys or "each
    run" redraw without a script error?"""
    numbers = _screens(app)
    assert len(numbers) == 2
    session = browser_session(DESKTOP)
    page = session.login()
    page.goto(f"/experiments/compare?e={numbers[0]}&e={numbers[1]}&group=seed")
    chart = page.locator("[data-metric-chart]").first
    chart.locator("canvas").wait_for()
    page.wait_for_function("document.querySelector('[data-metric-chart]').dataset.groups === '3'")
    legend = chart.locator(".u-legend").inner_text()
    for seed in range(3):
        assert f"seed {seed} · mean of 4 runs" in legend
    assert page.locator("[data-metric-group]").input_value() == "seed"
    keys = page.locator("[data-metric-group] option").all_inner_texts()
    assert "experiment (2 values)" in keys and "seed (3 values)" in keys
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:  # for docs/screenshots: looked at before it is kept
        page.screenshot(path=os.path.join(shots, "compare-grouped-by-seed-desktop-light.png"), full_page=True)
    page.select_option("[data-metric-spread]", "std")
    page.select_option("[data-metric-group]", "experiment")
    page.wait_for_function("document.querySelector('[data-metric-chart]').dataset.groups === '2'")
    page.select_option("[data-metric-group]", "")
    page.wait_for_function("document.querySelector('[data-metric-chart]').dataset.groups === ''")
    assert "run 0 · 5e3d1c2" in chart.locator(".u-legend").inner_text()
    assert_clean(session)
