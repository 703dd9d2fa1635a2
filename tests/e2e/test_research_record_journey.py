"""The research record end to end in a real browser (SPEC §11): the owner creates a project and
a belief in it, fills the library three ways (an arXiv id looked up at the loopback fake, a
BibTeX upload, by hand), starts an experiment in the project and links it as testing the
belief from the links panel; the demo journey's scripted agents carry it through a real worker
and two local pods to a clean result, and the analyzer proposes an update to the belief; the
owner accepts it; the belief's history, the project page and the project's share link show it.

The journey runs without the code-writing stage (the pods run the plan's own script), as
`make demo` does on a host with no sandbox: the belief update is the analyzer's, not the
implementer's, and this keeps each size well under three minutes.
"""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.actions import DESKTOP, PHONE, assert_clean, move_card
from tests.e2e.fit import assert_no_sideways_scroll
from tests.e2e.test_journey import _stack, _wait_for
from tests.fakes.literature_server import FakeLiterature

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BELIEF_TEXT = "Seeds of the probe should land close together."
ACCEPTED_TEXT = "Two seeds of the probe land within two points of accuracy."
BIBTEX = b"""@article{kaplan2020scaling,
  title = {Scaling Laws for Neural Language Models},
  author = {Kaplan, Jared and McCandlish, Sam},
  journal = {arXiv preprint},
  year = {2020}
}
"""


@pytest.fixture
def journey_without_code(app, live_server, monkeypatch, tmp_path):
    """The demo's scripted agents and a real worker process, the pods running the plan's script."""
    yield from _stack(app, live_server, monkeypatch, tmp_path, code_stage=False)


@pytest.fixture
def fake_arxiv(app):
    """arXiv (and the other metadata sources) at a loopback fake that knows one paper."""
    with FakeLiterature() as fake:
        fake.arxiv["2401.01234"] = ("Seed variance in linear probes", ["Ada Lovelace", "Alan Turing"],
                                    "Probes trained from different seeds agree closely.")
        saved = {key: app.config.get(key) for key in fake.config()}
        app.config.update(fake.config())
        try:
            yield fake
        finally:
            app.config.update(saved)


def _create_project(page) -> str:
    page.goto("/projects")
    page.get_by_role("link", name="New project").first.click()
    page.locator("input[name=title]").fill("Probe stability")
    page.get_by_label("Question").fill("Do linear probes trained from different seeds agree?")
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url("**/p/probe-stability")
    return "probe-stability"


def _create_belief(page) -> None:
    page.goto("/beliefs/new")
    page.locator("input[name=title]").fill("The probe is stable across seeds")
    page.locator("textarea[name=current_belief]").fill(BELIEF_TEXT)
    page.locator("select[name=status]").select_option("active")
    page.locator("select[name=confidence]").select_option("LOW")
    page.locator("select[name=project]").select_option("probe-stability")
    page.locator("textarea[name=next_test]").fill("Run two seeds and compare their final accuracy.")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url("**/beliefs/1")
    assert "version 1" in page.locator(".belief-head").inner_text()


def _fill_library(page, tmp_path) -> None:
    page.goto("/library")
    page.get_by_label("arXiv id, DOI or URL").fill("arXiv:2401.01234")
    page.get_by_role("button", name="Look up and add").click()
    page.get_by_text("Probes trained from different seeds agree closely.").wait_for()

    page.goto("/library")
    bib = tmp_path / "papers.bib"
    bib.write_bytes(BIBTEX)
    page.get_by_label("BibTeX file").set_input_files(str(bib))
    page.get_by_role("button", name="Import BibTeX").click()
    page.get_by_text("BibTeX: 1 added, 0 merged").wait_for()

    page.locator("#add summary").get_by_text("Enter by hand").click()
    manual = page.locator("#add details form")
    manual.get_by_label("Title").fill("Notes on seed sensitivity from the reading group")
    manual.get_by_label("Authors").fill("Grace Hopper")
    manual.get_by_label("Year").fill("2025")
    manual.get_by_label("Project").select_option(label="Probe stability")
    manual.get_by_role("button", name="Add to the library").click()
    page.wait_for_url(re.compile(r"/library/[0-9a-f-]+$"))

    page.goto("/library")
    items = page.locator("#library-items")
    for title in ("Seed variance in linear probes", "Scaling Laws for Neural Language Models",
                  "Notes on seed sensitivity from the reading group"):
        expect(items).to_contain_text(title)
    assert_no_sideways_scroll(page)


def _start_linked_experiment(page) -> int:
    page.goto("/p/probe-stability")
    page.get_by_role("link", name="New experiment in this project").click()
    page.get_by_label("Title").fill("Do two seeds of the probe agree?")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(r"/experiments/\d+$"))
    number = int(re.search(r"/experiments/(\d+)", page.url).group(1))
    links = page.locator("#links")
    links.locator("summary").get_by_text("Add a link").click()
    links.get_by_label("Relation").select_option("tests")
    links.get_by_label("Linked record").fill("B1")
    links.get_by_role("button", name="Add link").click()
    links.locator(".link-row").get_by_text("The probe is stable across seeds").wait_for()
    return number


def _carry_through_the_journey(app, page, number: int) -> None:
    page.goto("/board")
    move_card(page, number, "clarifying")
    _wait_for(app, number, {"awaiting_clarifications"})
    page.goto(f"/experiments/{number}")
    page.get_by_label("How many seeds should the demo run?").fill("Two.")
    page.get_by_label("Which metric matters most?").fill("Accuracy.")
    page.get_by_role("button", name="Send answers to the planner").click()
    _wait_for(app, number, {"plan_pending"})
    page.goto("/approvals")
    page.locator(".queue-item a").first.click()
    page.get_by_role("button", name="Approve", exact=True).click()
    page.get_by_role("button", name="Approve anyway").click()
    page.get_by_text("This request is").wait_for()
    _wait_for(app, number, {"awaiting_promotion"}, seconds=150)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_project_belief_library_experiment_proposal_share(app, browser_session, owner_account, fake_arxiv,
                                                           journey_without_code, tmp_path, viewport):
    """Project → belief in it → three papers (arXiv id, BibTeX, by hand) → an experiment linked
    as testing the belief → the scripted journey to a clean result → the analyzer's proposed
    update accepted in the browser: does the belief's history show version 2 on the evidence
    of the experiment, the project page the belief as established with the experiment, and the
    project's share link the belief's new text — all fitting the screen, with no CSP refusal?"""
    session = browser_session(viewport)
    page = session.login()
    slug = _create_project(page)
    _create_belief(page)
    _fill_library(page, tmp_path)
    number = _start_linked_experiment(page)
    _carry_through_the_journey(app, page, number)

    # The analyzer's proposal waits on the belief's page; the owner accepts it as proposed.
    page.goto("/beliefs/1")
    proposals = page.locator("#proposals")
    expect(proposals).to_contain_text(f"from #{number}")
    expect(proposals).to_contain_text("active → supported")
    assert_no_sideways_scroll(page)
    page.get_by_role("button", name="Accept as proposed").click()
    page.wait_for_url("**/beliefs/1#history")
    assert page.locator("#proposals").count() == 0
    head = page.locator(".belief-head").inner_text()
    assert "version 2" in head and "supported" in head and "LOW confidence" in head
    newest = page.locator(".belief-version").first
    expect(newest).to_contain_text("v2")
    expect(newest).to_contain_text(f"on the evidence of #{number}")
    assert newest.get_by_role("link", name=f"#{number}").get_attribute("href").endswith(f"/experiments/{number}")
    expect(page.locator(".belief-version")).to_have_count(2)
    assert_no_sideways_scroll(page)

    # The project page: the belief is established now, citing the experiment, under Supported.
    page.goto(f"/p/{slug}")
    question = page.locator("#research-questions .research-question").first
    expect(question).to_contain_text("Established:")
    expect(question).to_contain_text(ACCEPTED_TEXT)
    expect(question.get_by_role("link", name=f"#{number}")).to_be_visible()
    expect(page.locator("#beliefs")).to_contain_text("Supported")
    expect(page.locator("#experiments")).to_contain_text(f"#{number}")
    expect(page.locator("#literature")).to_contain_text("Notes on seed sensitivity from the reading group")
    assert_no_sideways_scroll(page)

    # A share link made on the project page shows a mentor the belief's public text.
    page.get_by_label("Label").fill("For Ada")
    page.get_by_role("button", name="Create project share link").click()
    url = page.locator("#new-share-url").input_value()
    mentor = browser_session(viewport)
    mentor.page.goto(url)
    body = mentor.page.inner_text("body")
    assert "The probe is stable across seeds" in body and ACCEPTED_TEXT in body
    assert "supported" in body.lower()
    assert_no_sideways_scroll(mentor.page)
    assert mentor.context.cookies() == []
    assert_clean(session)
    assert_clean(mentor)
