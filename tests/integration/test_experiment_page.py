"""One experiment's page `/experiments/<n>` (SPEC §9.1): record, status and turn,
timeline (newest first, paged, filterable), status changes and record edits."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import WorkflowEvent, db
from services.core import clock, events
from services.core.actors import Actor
from services.planning import approvals, questions
from services.results import results
from services.workflow import experiments
from tests.integration.pages import older_events_link, text, timeline_notes

SYSTEM = Actor("system", None, "test")


def _add_notes(app, number: int, count: int) -> None:
    """`count` note events, one second apart, "Event 0" oldest."""
    with app.app_context():
        experiment = experiments.get_experiment(number)
        for i in range(count):
            clock.advance(timedelta(seconds=1))
            events.record(experiment, "note", SYSTEM, note=f"Event {i}")
        db.session.commit()


def _snapshot(app, number: int) -> dict:
    with app.app_context():
        e = experiments.get_experiment(number)
        count = db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id))
                                  .where(WorkflowEvent.entity_id == e.id))
        return {"status": e.status, "title": e.title, "kind": e.kind, "priority": e.priority,
                "tags": list(e.tags), "hypothesis": e.hypothesis, "events": count}


def _status_error(response) -> str:
    match = re.search(r'<section[^>]*id="status".*?<p class="error"[^>]*>(.*?)</p>', text(response), re.S)
    assert match, "the status panel shows no error"
    return match.group(1).strip()


def test_page_shows_the_record_status_and_turn(client, owner, make_experiment):
    """Does the page show the title, number, record fields, status chip and turn text?"""
    number = make_experiment("Seed variance of probe accuracy", kind="survey", priority="urgent",
                             compute_size="small", tags=["probes", "seeds"],
                             hypothesis="Variance is under 1 point.", status="awaiting_clarifications")
    response = client.get(f"/experiments/{number}")
    assert response.status_code == 200
    body = text(response)
    assert f"#{number}" in body and "Seed variance of probe accuracy" in body
    for value in ("<dd>survey</dd>", "<dd>urgent</dd>", "<dd>small</dd>", "Variance is under 1 point."):
        assert value in body
    assert '<span class="tag">probes</span>' in body and '<span class="tag">seeds</span>' in body
    assert "status-awaiting_clarifications" in body
    assert "Owner turn: answer Sagan questions" in body


def test_page_has_the_sections_later_issues_fill(client, owner, make_experiment):
    """Are the plan, approvals, runs, pods, clean result and discussion sections present?"""
    body = text(client.get(f"/experiments/{make_experiment()}"))
    for section in ("plan", "approvals", "runs", "pods", "clean-result", "discussion", "timeline"):
        assert f'id="{section}"' in body, section


def test_unknown_experiment_is_a_404_page(client, owner):
    """Does an unknown number answer a 404 page that says so?"""
    response = client.get("/experiments/424242")
    assert response.status_code == 404
    assert "No experiment 424242" in text(response)
    assert client.get("/experiments/99999999999999999999999").status_code == 404


def test_timeline_is_newest_first(app, client, owner, make_experiment):
    """Does the timeline list the newest event first and the creation note last?"""
    number = make_experiment()
    _add_notes(app, number, 3)
    assert timeline_notes(client.get(f"/experiments/{number}")) == [
        "Event 2", "Event 1", "Event 0", "Experiment created."]


def test_timeline_pages_through_older_events(app, client, owner, make_experiment):
    """With 61 events, does the page show the newest 50 and "Older events" lead to the other 11?"""
    number = make_experiment()
    _add_notes(app, number, 60)
    first = client.get(f"/experiments/{number}")
    notes = timeline_notes(first)
    assert notes == [f"Event {i}" for i in range(59, 9, -1)]
    link = older_events_link(first)
    assert link and link.startswith(f"/experiments/{number}/timeline?before=")

    second = client.get(link)
    assert second.status_code == 200
    assert timeline_notes(second) == [f"Event {i}" for i in range(9, -1, -1)] + ["Experiment created."]
    assert older_events_link(second) is None


def test_older_events_come_as_a_fragment_for_htmx(app, htmx_client, make_experiment):
    """Does the htmx "Older events" request get only the timeline rows?"""
    number = make_experiment()
    _add_notes(app, number, 55)
    link = older_events_link(htmx_client.get(f"/experiments/{number}", headers={"HX-Request": "false"}))
    response = htmx_client.get(link)
    assert "<html" not in response.text
    assert 'id="status"' not in response.text
    assert timeline_notes(response)[0] == "Event 4"
    assert "HX-Request" in response.headers["Vary"]


def test_bad_cursor_is_a_clear_error(client, owner, make_experiment):
    """Is a mangled `before` cursor answered with a clear 400, not a 500?"""
    number = make_experiment()
    response = client.get(f"/experiments/{number}/timeline?before=yesterday")
    assert response.status_code == 400
    assert "That page link is not valid." in text(response)


def test_timeline_filters_by_event_type(app, client, owner, make_experiment):
    """Does ?event_type=state_changed show only status changes, and an unknown type show all events?"""
    number = make_experiment(status="clarifying")
    _add_notes(app, number, 2)
    body = text(client.get(f"/experiments/{number}?event_type=state_changed"))
    assert "proposed → clarifying" in body
    assert "Event 0" not in body and "Experiment created." not in body
    notes_only = timeline_notes(client.get(f"/experiments/{number}?event_type=note"))
    assert notes_only == ["Event 1", "Event 0", "Experiment created."]
    response = client.get(f"/experiments/{number}?event_type=bogus")
    assert response.status_code == 200  # an unknown filter value is ignored
    assert text(response).count('<li class="event ') == 4


def test_timeline_marker_filter_offers_groups_in_words_and_filters_by_group(app, client, owner, make_experiment):
    """Does the marker filter offer a few groups in words (not ~40 internal names such as "Interp
    critique codex"), does ?marker=code show every code-review marker and nothing else, and is an
    exact marker name still honoured?"""
    number = make_experiment(status="clarifying")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        for marker, note in (("epm:code-review", "Claude's review"), ("epm:code-review-codex", "Codex's review"),
                             ("epm:interp-critique-codex", "A critique")):
            clock.advance(timedelta(seconds=1))
            events.record(experiment, "marker", SYSTEM, marker=marker, note=note)
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    select = page.split('name="marker"', 1)[1].split("</select>", 1)[0]
    options = re.findall(r"<option value=\"([^\"]*)\"[^>]*>([^<]*)</option>", select)
    assert len(options) <= 10
    assert ("code", "Code, its review and tests") in options
    assert not any("codex" in label.lower() or label.startswith("epm") for _, label in options)
    assert timeline_notes(client.get(f"/experiments/{number}?marker=code")) == ["Codex's review", "Claude's review"]
    assert timeline_notes(client.get(f"/experiments/{number}?marker=epm:code-review")) == ["Claude's review"]
    assert timeline_notes(client.get(f"/experiments/{number}?marker=analysis")) == ["A critique"]


def _change(client, owner, number, to, expected=None, note=None, follow_redirects=False):
    data = {"to": to, "csrf_token": owner.csrf()}
    if expected:
        data["expected"] = expected
    if note is not None:
        data["note"] = note
    return client.post(f"/experiments/{number}/status", data=data, follow_redirects=follow_redirects)


def test_status_change_from_the_page(app, client, owner, make_experiment):
    """Does an allowed move from the page change the status and show it in the timeline?"""
    number = make_experiment()
    response = _change(client, owner, number, "clarifying", "proposed")
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/experiments/{number}#status")
    assert response.headers["HX-Trigger"] == "pipeline-changed"
    assert _snapshot(app, number)["status"] == "clarifying"
    assert "proposed → clarifying" in text(client.get(f"/experiments/{number}"))


def test_status_change_fragment_for_htmx(app, htmx_client, make_experiment, monkeypatch):
    """After an htmx move, does every panel that shows the status say the new one in the same
    swap — the status panel, the stepper's "Next: …" and the timeline's move — with the poll
    holding the new page version (agents on, so the turn is Sagan's)?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "sk-ant-test-0000000000000000")
    number = make_experiment()
    response = htmx_client.post(f"/experiments/{number}/status",
                                data={"to": "clarifying", "expected": "proposed"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    body = text(response)
    assert "<html" not in body
    assert body.lstrip().startswith('<div id="experiment-live"')
    status = re.search(r'<section class="panel status-panel.*?</section>', body, re.S).group(0)
    assert "Sagan turn: clarify hypothesis and information gain" in status
    stepper = re.search(r'<section class="stepper.*?</section>', body, re.S).group(0)
    assert re.search(r'<strong>Clarifying</strong>.*Next: <strong>Sagan</strong> — clarify hypothesis', stepper, re.S)
    assert "clarify scope" not in body  # the turn of the status it left, nowhere
    timeline = re.search(r'<ol class="timeline" id="timeline-list">.*?</ol>', body, re.S).group(0)
    assert "proposed → clarifying" in timeline
    with app.app_context():
        version = experiments.page_version(number).version
    assert f'data-version="{version}"' in body and f'\\"{version}\\"' in response.text


@pytest.mark.parametrize("to, expected, note, message", [
    ("running", "proposed", None, "cannot move from proposed to running"),
    ("blocked", "proposed", "", "needs a note"),
    ("archived", "proposed", None, "needs a note"),
    ("warp_speed", "proposed", None, "Unknown status 'warp_speed'"),
    ("planning", "clarifying", None, "is now proposed"),
])
def test_refused_status_change_shows_why_and_changes_nothing(app, client, owner, make_experiment,
                                                             to, expected, note, message):
    """Is a refused move from the page explained next to the control, with nothing changed?"""
    number = make_experiment()
    before = _snapshot(app, number)
    refused = _change(client, owner, number, to, expected, note)
    assert refused.status_code == 303 and "HX-Trigger" not in refused.headers
    response = client.get(refused.headers["Location"])
    assert message in _status_error(response)
    # Shown once: a reload of the page is the page as it is, without the old refusal.
    assert 'class="error"' not in text(client.get(refused.headers["Location"]))
    assert _snapshot(app, number) == before


def _selected(form_html: str) -> list[str]:
    return re.findall(r'<option value="([^"]*)"[^>]*\bselected\b', form_html)


def test_refused_status_change_keeps_the_chosen_status_and_note(app, htmx_client, make_experiment):
    """As on the board: does the refused panel's form still hold the chosen status
    and the note typed, so adding what was missing is enough?"""
    number = make_experiment()
    response = htmx_client.post(f"/experiments/{number}/status", data={"to": "blocked", "expected": "proposed",
                                                                      "note": "  "},
                                headers={"X-CSRFToken": htmx_client.csrf})
    body = text(response)
    assert "needs a note" in body
    move_form = re.search(r'<form[^>]*action="[^"]*/status".*?</form>', body, re.S).group(0)
    assert _selected(move_form) == ["blocked"]
    override = re.search(r'<details class="override".*?</details>', body, re.S).group(0)
    assert _selected(override) == [""]  # the other form keeps its placeholder

    response = htmx_client.post(f"/experiments/{number}/status", data={"to": "planning", "expected": "clarifying",
                                                                      "note": "from <b>me</b>"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert "is now proposed" in text(response)
    assert 'value="from &lt;b&gt;me&lt;/b&gt;"' in response.text  # kept, as text
    move_form = re.search(r'<form[^>]*action="[^"]*/status".*?</form>', text(response), re.S).group(0)
    assert _selected(move_form) == ["planning"]


def test_refused_override_keeps_its_choice_across_the_redirect(app, client, owner, make_experiment):
    """A no-JavaScript override refused (no note): does the page after the redirect open the
    override holding the status, once?"""
    number = make_experiment()
    refused = client.post(f"/experiments/{number}/override", data={"to": "running", "note": "",
                                                                 "csrf_token": owner.csrf()})
    assert refused.status_code == 303
    page = text(client.get(refused.headers["Location"]))
    override = re.search(r'<details class="override"([^>]*)>.*?</details>', page, re.S)
    assert "open" in override.group(1) and _selected(override.group(0)) == ["running"]
    again = text(client.get(refused.headers["Location"]))
    assert _selected(re.search(r'<details class="override".*?</details>', again, re.S).group(0)) == [""]
    assert _snapshot(app, number)["status"] == "proposed"


def test_edit_record_saves_and_logs_the_change(app, client, owner, make_experiment):
    """Does a valid edit save the fields and log which fields changed?"""
    number = make_experiment("Old title")
    response = client.post(f"/experiments/{number}/edit", data={
        "title": "New title", "kind": "infra", "priority": "high", "tags": "a, b",
        "hypothesis": "", "compute_size": "", "csrf_token": owner.csrf()})
    assert response.status_code == 303
    page = client.get(response.headers["Location"])
    assert "New title" in text(page)
    assert timeline_notes(page)[0].startswith("Edited title, ")
    after = _snapshot(app, number)
    assert (after["title"], after["kind"], after["priority"], after["tags"]) == (
        "New title", "infra", "high", ["a", "b"])


@pytest.mark.parametrize("fields, message", [
    ({"title": ""}, "Title is required."),
    ({"title": "y" * 301}, "the limit is 300"),
    ({"kind": "poem"}, "Kind must be one of"),
    ({"tags": ",".join(str(i) for i in range(51))}, "At most 50 tags."),
    ({"tags": "z" * 81}, "longer than 80 characters"),
])
def test_edit_with_bad_input_shows_a_message_and_changes_nothing(app, client, owner, make_experiment,
                                                                 fields, message):
    """Is a bad edit answered with the message on the page and the record left as it was?"""
    number = make_experiment("Keep this title", tags=["keep"])
    before = _snapshot(app, number)
    response = client.post(f"/experiments/{number}/edit", data={**fields, "csrf_token": owner.csrf()},
                           follow_redirects=True)
    assert response.status_code == 200
    assert message in text(response)
    assert _snapshot(app, number) == before


# --- the owner's turn first, the question kept ----------------------------------------------------

def _owner_action(html: str) -> str | None:
    found = re.search(r'<section class="owner-action.*?</section>', html, re.S)
    return found.group(0) if found else None


def test_the_owners_turn_is_one_button_above_a_folded_move_form(app, client, owner, make_experiment):
    """Plan pending, questions open, blocked: is the one thing asked of the owner the first panel
    (a link to the approval, to the questions, a resume move), with "Move to" folded under it;
    and with Sagan's turn, no such panel and the move form open as before?"""
    pending = make_experiment("Pending", status="plan_pending")
    asking = make_experiment("Asking", status="clarifying")
    blocked = make_experiment("Blocked", status="blocked")
    sagans = make_experiment("Sagan's turn")
    with app.app_context():
        questions.ask(experiments.get_experiment(asking), [{"key": "seeds", "text": "How many seeds?"},
                                                           {"key": "gpu", "text": "Which GPU?"}],
                      Actor("agent", "run", "planner"))
        db.session.commit()
        request_id = approvals.plan_overview(experiments.get_experiment(pending)).pending.id

    page = text(client.get(f"/experiments/{pending}"))
    action = _owner_action(page)
    assert page.index('class="owner-action') < page.index('id="stepper"') < page.index('id="status"')
    assert f'href="/approvals/{request_id}"' in action and "Review plan v1 and approve" in action
    assert re.search(r'<details class="other-moves">\s*<summary>Move to another status…</summary>', page)

    action = _owner_action(text(client.get(f"/experiments/{asking}")))
    assert 'href="#questions"' in action and "Answer 2 questions from Sagan" in action

    action = _owner_action(text(client.get(f"/experiments/{blocked}")))
    assert 'name="to" value="running"' in action and "Unblock: resume running" in action
    assert "CUDA out of memory" in action  # why it is blocked, above the button

    page = text(client.get(f"/experiments/{sagans}"))
    assert _owner_action(page) is None and "other-moves" not in page
    assert re.search(r'<form method="post" action="[^"]*/status"', page)


def test_the_resume_button_lifts_the_block(app, htmx_client, make_experiment):
    """Does the blocked experiment's one button (a move back where it stopped) work as a move,
    answering the whole live region with the new status?"""
    number = make_experiment("Blocked", status="blocked")
    response = htmx_client.post(f"/experiments/{number}/status", data={"to": "running", "expected": "blocked"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert response.status_code == 200 and _owner_action(text(response)) is None
    assert _snapshot(app, number)["status"] == "running"


def test_the_header_keeps_the_question_a_result_title_replaced(app, client, owner, make_experiment):
    """A clean result's title (its finding) replaces the experiment's title: does the page's
    header still show the question asked, and the finding, confidence and numbers open the page
    before the stepper and the moves?"""
    html = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
    number = make_experiment("Does the curriculum speed up the 125M model?", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, html, Actor("agent", None, "analyzer"),
                                  title="Curriculum ordering changes final loss by <1% (MODERATE confidence)")
        results.save_clean_result(experiment, None, Actor("owner"), title="A second title (LOW confidence)")
        db.session.commit()
        assert experiment.question == "Does the curriculum speed up the 125M model?"
    page = text(client.get(f"/experiments/{number}"))
    assert re.search(r'<h1><span class="number">#\d+</span> Does the curriculum speed up the 125M model\?</h1>', page)
    summary = re.search(r'<section class="panel result-summary".*?</section>', page, re.S).group(0)
    assert "A second title" in summary and "LOW confidence" in summary
    assert "curriculum 2.871 vs. shuffled 2.888" in summary and 'class="result-frame summary-frame"' in summary
    assert page.index('id="result-summary"') < page.index('id="stepper"') < page.index('id="status"')
