"""A run's page in a real browser: events stream in by polling and stop when the run ends.

The test appends events through services.workflow.runs while the page is open, as a worker would,
and watches the page's requests to `/runs/<id>/events`: quiet polls are answered 204 and
polling carries on; once the run has ended the last answer has no poll element and the
page asks nothing more.
"""
from __future__ import annotations

import pytest

from tests.e2e.actions import NO_RELOAD_MARK, PHONE, assert_clean, assert_not_reloaded
from tests.e2e.fit import assert_no_sideways_scroll
from tests.integration.test_run_pages import add_events, make_run, run_row

pytestmark = pytest.mark.browser


@pytest.fixture
def fast_run_poll(app, monkeypatch):
    """The run page polls every second instead of every two."""
    monkeypatch.setitem(app.config, "POLL_RUN_SECONDS", 1)
    return 1


def _open_run(session, run_id: str):
    page = session.login()
    page.goto(f"/runs/{run_id}")
    page.locator("#run-events").wait_for()
    page.evaluate(NO_RELOAD_MARK)
    return page


def _watch_polls(page) -> list[tuple[str, int]]:
    """(url, status) of every events poll the page makes from now on."""
    seen: list[tuple[str, int]] = []
    page.on("response", lambda r: seen.append((r.url, r.status)) if "/events?after=" in r.url else None)
    return seen


def test_events_stream_in_and_polling_stops_when_the_run_ends(app, browser_session, owner_account,
                                                              make_experiment, fast_run_poll):
    """Do appended events appear without a reload, and does polling stop once the run completed?"""
    number = make_experiment("Live run", status="implementing")
    run_id = make_run(app, number, status="running", events=2)
    session = browser_session()
    page = _open_run(session, run_id)
    polls = _watch_polls(page)
    assert page.locator(".run-event").count() == 2
    assert page.locator(".events-poll").count() == 1

    # A quiet stretch first: the polls answer 204 and the page keeps asking.
    page.wait_for_timeout(2_600)
    assert [status for _url, status in polls].count(204) >= 2, polls
    assert page.locator(".events-poll").count() == 1

    add_events(app, run_id, ("assistant_text", "Third step, written while the page was open"),
               ("tool_call", "list_pods", {"tool": "list_pods", "input": {"experiment": number}}))
    page.get_by_text("Third step, written while the page was open").wait_for(timeout=5_000)
    assert page.locator(".run-event").count() == 4
    assert page.locator(".run-event .tool-name", has_text="list_pods").count() == 1
    assert page.locator(".events-poll").count() == 1
    assert "after=4" in page.locator(".events-poll").get_attribute("hx-get")
    page.locator("#run-header .run-counts", has_text="4 events").wait_for(timeout=5_000)

    add_events(app, run_id, ("completed", "Finished: the clean result is drafted."), status="completed")
    page.get_by_text("Finished: the clean result is drafted.").wait_for(timeout=5_000)
    page.locator(".events-end").wait_for()
    assert page.locator(".events-poll").count() == 0
    page.locator("#run-header .run-status", has_text="completed").wait_for(timeout=5_000)
    assert page.locator("#run-header").get_by_role("button", name="Cancel run").count() == 0

    asked = len(polls)
    page.wait_for_timeout(2_600)  # more than two poll intervals
    assert len(polls) == asked, polls[asked:]
    assert [row.get_attribute("data-seq") for row in page.locator(".run-event").all()] == ["1", "2", "3", "4", "5"]
    assert_not_reloaded(page)
    assert_clean(session)


def test_cancel_button_confirms_and_the_page_follows(app, browser_session, owner_account, make_experiment,
                                                     fast_run_poll):
    """Does Cancel ask first, then show the cancelled run, its cancelled event, and stop polling (phone)?"""
    number = make_experiment("Cancel me", status="implementing")
    run_id = make_run(app, number, status="queued")
    session = browser_session(PHONE)
    page = _open_run(session, run_id)
    questions = []

    def answer(dialog):
        questions.append(dialog.message)
        dialog.dismiss() if len(questions) == 1 else dialog.accept()

    page.on("dialog", answer)
    page.get_by_role("button", name="Cancel run").click()
    page.wait_for_timeout(300)
    assert run_row(app, run_id)["status"] == "queued"  # dismissed: nothing sent

    page.get_by_role("button", name="Cancel run").click()
    page.locator("#run-header .run-status", has_text="cancelled").wait_for()
    assert questions[0].startswith(f"Cancel run {run_id[:8]}?")
    page.get_by_text("Run cancelled by owner").first.wait_for(timeout=5_000)
    page.locator(".events-end").wait_for()
    assert page.locator(".events-poll").count() == 0
    assert run_row(app, run_id)["status"] == "cancelled"
    assert_no_sideways_scroll(page, "the cancelled run's page")
    assert_not_reloaded(page)
    assert_clean(session)


def test_polling_pauses_in_a_hidden_tab_and_catches_up(app, browser_session, owner_account, fast_run_poll):
    """Does a hidden tab send no polls, and catch up with one poll as soon as it is shown again?"""
    run_id = make_run(app, status="running", events=1)
    session = browser_session()
    page = _open_run(session, run_id)
    page.evaluate("""() => {
        Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.wait_for_timeout(1_200)  # let a poll already in flight finish
    polls = _watch_polls(page)
    add_events(app, run_id, ("assistant_text", "Written while nobody looked"))
    page.wait_for_timeout(2_600)
    assert polls == [] and page.get_by_text("Written while nobody looked").count() == 0

    page.evaluate("""() => {
        Object.defineProperty(document, 'hidden', { configurable: true, get: () => false });
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.get_by_text("Written while nobody looked").wait_for(timeout=3_000)
    assert polls and polls[0][1] == 200
    assert_not_reloaded(page)
    assert_clean(session)
