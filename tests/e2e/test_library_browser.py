"""The literature library in Chromium: a phone and a laptop, the search box swapping the list,
a read-state quick action, and the item page."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from models import db
from services.research import literature
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll, assert_thumb_sized

TAP_EXEMPT = ".queue-title, .skip-link, label input[type=checkbox], label input[type=radio]"


def _seed(app) -> str:
    with app.app_context():
        first = literature.add({"title": "Sparse autoencoders find highly interpretable features in language models "
                                         "across many layers and training runs",
                                "authors": ["Hoagy Cunningham", "Aidan Ewart", "Logan Riggs", "Robert Huben",
                                            "Lee Sharkey"], "year": 2023, "venue": "ICLR",
                                "url": "https://arxiv.org/abs/2309.08600", "arxiv_id": "2309.08600",
                                "abstract": "Dictionary learning " * 60, "notes": "**Key** for belief 3",
                                "tags": ["interpretability", "a-rather-long-tag-name-indeed"]})
        literature.add({"title": "Scaling laws for neural language models", "authors": ["Jared Kaplan"],
                        "abstract": "Loss follows power laws.", "read_state": "queued"})
        db.session.commit()
        return str(first.item.id)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "laptop"])
def test_library_pages_fit_and_work(browser_session, owner_account, app, viewport):
    """Do /library and an item page fit the width, with thumb-sized controls on a phone, and does
    typing in the search box narrow the list without a reload?"""
    item_id = _seed(app)
    session = browser_session(viewport)
    page = session.login()
    for path in ["/library", f"/library/{item_id}", "/library?q=zebra"]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert_no_sideways_scroll(page, path)
        if viewport is PHONE:
            assert_thumb_sized(page, TAP_EXEMPT, path, skip_closed_details=True)
    page.goto("/library")
    page.evaluate("window.__notReloaded = true")
    page.get_by_label("Search").fill("power")
    expect(page.locator("#library-items .queue-item")).to_have_count(1)
    assert "Scaling laws" in page.locator("#library-items").inner_text()
    assert page.evaluate("window.__notReloaded") is True
    page.goto(f"/library/{item_id}")
    page.get_by_role("button", name="Reading").click()
    expect(page.locator("#item-state .chip")).to_have_text("reading")
    assert_clean(session)
