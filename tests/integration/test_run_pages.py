"""Run pages (SPEC §5.3, §9.3): `/runs`, `/runs/<id>`, the live events poll, Cancel, and the
runs section of the experiment page. Runs and events are made through services.workflow.runs."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import AgentRun, Experiment, RunEvent, WorkflowEvent, db
from services.core import clock
from services.core.clock import utcnow
from services.dispatch import recovery
from services.workflow import experiments
from services.workflow import runs as run_service
from tests.integration.pages import text
from tests.integration.queries import counting_queries

ORCHESTRATOR_REQUEST = "Drive the approved experiment to a clean result."


# --- helpers (also used by test_runs_api.py and the browser test) ----------------------

def make_run(app, number: int | None = None, *, status: str = "running", kind: str = "apply",
             agent: str = "experiment-orchestrator", request: str = ORCHESTRATOR_REQUEST,
             events: list | int = 0, **fields) -> str:
    """A run through services.workflow.runs (scoped to experiment `number`), with events; its id."""
    with app.app_context():
        scope_id = experiments.get_experiment(number).id if number is not None else None
        run = run_service.create_run(kind=kind, agent=agent, request=request, scope_id=scope_id,
                                     status="queued")
        if status != "queued":
            run_service.set_status(run, status)
        for name, value in fields.items():
            setattr(run, name, value)
        if isinstance(events, int):
            events = [("assistant_text", f"Step {i}", None) for i in range(events)]
        for event_type, body, metadata in events:
            run_service.append_event(run.id, event_type, body, metadata)
        db.session.commit()
        return str(run.id)


def add_events(app, run_id: str, *events, status: str | None = None) -> None:
    """Append (event_type, body[, metadata]) events, optionally moving the run's status."""
    with app.app_context():
        for event in events:
            event_type, body, *rest = event
            run_service.append_event(uuid.UUID(run_id), event_type, body, rest[0] if rest else None)
        if status:
            run_service.set_status(run_service.get_run(run_id), status)
        db.session.commit()


def bulk_events(app, run_id: str, count: int) -> None:
    """`count` assistant_text events in one insert (fast, for size tests), seq 1…count."""
    with app.app_context():
        now = utcnow()
        db.session.execute(sa.insert(RunEvent), [
            {"id": uuid.uuid4(), "run_id": uuid.UUID(run_id), "seq": i, "event_type": "assistant_text",
             "body": f"Bulk {i}", "created_at": now, "updated_at": now} for i in range(1, count + 1)])
        db.session.execute(sa.update(AgentRun).where(AgentRun.id == uuid.UUID(run_id)).values(last_seq=count))
        db.session.commit()


def run_row(app, run_id: str) -> dict:
    with app.app_context():
        run = run_service.get_run(run_id)
        return {"status": run.status, "last_seq": run.last_seq, "cancel_requested_at": run.cancel_requested_at,
                "failure_reason": run.failure_reason,
                "events": [(e.event_type, e.body) for e in run_service.events_after(run.id, 0)]}


def event_seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<li class="run-event[^"]*" data-seq="(\d+)"', html)]


def poll_element(html: str) -> str | None:
    match = re.search(r'<li class="events-poll"[^>]*>', html)
    return match.group(0) if match else None


def poll_url(html: str) -> str | None:
    element = poll_element(html)
    return re.search(r'hx-get="([^"]+)"', element).group(1).replace("&amp;", "&") if element else None


# --- the run page -----------------------------------------------------------------------

def test_run_page_header_shows_kind_id_agent_status_counts_tokens_and_cost(app, client, owner, make_experiment):
    """Does the header show kind, `Run <id8>`, agent, status, "N events · latest …", tokens and cost?"""
    number = make_experiment("Seed variance of the probe")
    run_id = make_run(app, number, events=3, input_tokens=12_345, output_tokens=678, cost_usd=1.5, model="claude-x")
    response = client.get(f"/runs/{run_id}")
    assert response.status_code == 200
    body = text(response)
    header = re.search(r'<section class="panel run-header".*?</section>', body, re.S).group(0)
    assert "apply" in header and f"Run <code class=\"run-id\">{run_id.replace('-', '')[:8]}</code>" in header
    assert "experiment-orchestrator" in header
    assert "run-status-running" in header and ">running<" in header
    assert "3 events · latest just now" in header
    assert "12,345 in · 678 out" in header and "$1.50" in header
    assert f"#{number} Seed variance of the probe" in header
    assert "Cancel run" in header


def test_recovery_run_shows_badge_request_parts_and_resume_history(app, client, owner, make_experiment):
    """Is a recovery run badged, its request split into its three parts, and the history linked both ways?"""
    number = make_experiment()
    failed_id = make_run(app, number, status="failed", events=[("assistant_text", "Launching pods", None)],
                         failure_reason="worker_lost", last_error="The worker stopped heartbeating.")
    with app.app_context():
        request = recovery.recovery_request(run_service.get_run(failed_id))
    recovery_id = make_run(app, number, status="queued", request=request, resumes_run_id=uuid.UUID(failed_id))

    body = text(client.get(f"/runs/{recovery_id}"))
    assert '<span class="chip badge-recovery">auto-recovery</span>' in body
    request_html = re.search(r'<section class="panel" id="request">.*?</section>', body, re.S).group(0)
    for part in ("Original request", "Failure or crash reason", "Previous run transcript"):
        assert part in request_html
    assert ORCHESTRATOR_REQUEST in request_html
    assert "worker_lost: The worker stopped heartbeating." in request_html
    assert "assistant_text: Launching pods" in request_html
    assert "[auto-recovery-for:" not in request_html  # the parts, not the raw prompt
    assert f'This run resumes <a href="/runs/{failed_id}">{failed_id[:8]}</a>.' in body

    failed_page = text(client.get(f"/runs/{failed_id}"))
    assert (f'An automatic recovery run was queued as <a href="/runs/{recovery_id}">{recovery_id[:8]}</a>.'
            in failed_page)
    assert "worker_lost" in failed_page  # the failure reason in the header


def test_child_run_shows_follow_up_badge_and_parent_lists_its_events(app, client, owner, make_experiment):
    """Does a child run say "Follow-up of run <id8>", and the parent show the child's events in a group?"""
    number = make_experiment()
    parent_id = make_run(app, number, status="waiting")
    child_id = make_run(app, number, kind="experiment", agent="pod-provisioner", parent_run_id=uuid.UUID(parent_id),
                        events=[("deploy_started", "dispatching 2 pod(s)", None)])
    child_page = text(client.get(f"/runs/{child_id}"))
    assert f'href="/runs/{parent_id}">Follow-up of run {parent_id[:8]}</a>' in child_page
    parent_page = text(client.get(f"/runs/{parent_id}"))
    group = re.search(r'<details class="child-run">.*?</details>\s*</section>', parent_page, re.S).group(0)
    assert f"Run {child_id[:8]}" in group and "pod-provisioner" in group
    assert "dispatching 2 pod(s)" in group and "category-tools" in group


def test_parent_page_costs_the_same_queries_for_one_or_four_sub_agents(app, client, owner, make_experiment):
    """Are the sub-agents' latest events read in one query (not one per child), and does each
    child show its own latest events only?"""
    from blueprints.runs import CHILD_EVENTS
    number = make_experiment()
    parent_id = make_run(app, number, status="waiting")
    make_run(app, number, agent="code-reviewer", parent_run_id=uuid.UUID(parent_id),
             events=[("assistant_text", f"one-{i}", None) for i in range(CHILD_EVENTS + 2)])
    client.get(f"/runs/{parent_id}")
    with counting_queries() as one:
        page = text(client.get(f"/runs/{parent_id}"))
    assert "one-0<" not in page and "one-1<" not in page and f"one-{CHILD_EVENTS + 1}" in page
    for i in range(3):
        make_run(app, number, agent="code-plan-reviewer", parent_run_id=uuid.UUID(parent_id),
                 events=[("assistant_text", f"child {i}", None)])
    with counting_queries() as four:
        page = text(client.get(f"/runs/{parent_id}"))
    assert all(f"child {i}" in page for i in range(3))
    assert len(four) == len(one), (len(one), len(four))


def test_plan_the_run_wrote_is_shown_escaped(app, client, owner, make_experiment):
    """Is the run's own plan shown (not the experiment's), as escaped text?"""
    run_id = make_run(app, make_experiment(), plan_md="# Plan\n\n<script>alert(1)</script> run the sweep")
    raw = client.get(f"/runs/{run_id}").text
    plan = re.search(r'<section class="panel" id="run-plan">.*?</section>', raw, re.S).group(0)
    assert "Plan this run wrote" in plan
    assert "&lt;script&gt;alert(1)&lt;/script&gt; run the sweep" in plan
    assert "<script>alert" not in raw


def test_event_rows_show_time_type_category_and_escaped_bodies(app, client, owner, make_experiment):
    """Does each row carry an ISO time, its type and category, and bodies escaped as text?"""
    run_id = make_run(app, make_experiment(), events=[
        ("started", "kind=apply", {"agent": "experiment-orchestrator", "model": "m"}),
        ("assistant_text", "<img src=x onerror=alert(1)> looks fine", None),
        ("tool_call", "get_experiment", {"tool": "get_experiment", "input": {"number": 7, "note": "<b>hi</b>"}}),
        ("tool_result", "{\"ok\": true}", {"tool": "get_experiment", "is_error": True}),
        ("pod_status", "RUNNING", {"pod_id": "p1"}),
    ])
    raw = client.get(f"/runs/{run_id}").text
    rows = re.findall(r'<li class="run-event.*?</li>', raw, re.S)
    assert len(rows) == 5
    assert all(re.search(r'<time datetime="\d{4}-\d\d-\d\dT[\d:.]+\+00:00"', row) for row in rows)
    categories = [re.search(r'category-(\w+)', row).group(1) for row in rows]
    assert categories == ["agent", "agent", "tools", "tools", "tools"]
    assert "&lt;img src=x onerror=alert(1)&gt; looks fine" in rows[1] and "<img" not in raw
    assert '<code class="tool-name">get_experiment</code>' in rows[2]
    tool_input = re.search(r'<details class="tool-input"><summary>Input</summary><pre>(.*?)</pre>', rows[2], re.S)
    assert tool_input and '"number": 7' in text(tool_input.group(1))
    assert "&lt;b&gt;hi&lt;/b&gt;" in tool_input.group(1)  # escaped once, shown as typed
    assert "error</span>" in rows[3]


def test_long_bodies_are_truncated_with_show_all(app, client, owner, make_experiment):
    """Is a body over ~600 characters previewed, with the whole text behind "Show all"?"""
    long_body = "A" * 590 + "B" * 400 + "END"
    run_id = make_run(app, make_experiment(), events=[("assistant_text", long_body, None)])
    row = re.search(r'<li class="run-event.*?</li>', client.get(f"/runs/{run_id}").text, re.S).group(0)
    preview = re.search(r'<div class="body-text preview">(.*?)</div>', row, re.S).group(1)
    assert len(preview) < 700 and "END" not in preview
    assert "Show all (993 characters)" in row
    assert long_body in row


def test_first_render_shows_latest_200_and_show_earlier_pages_back(app, client, htmx_client, owner):
    """Does the page show only the latest 200 events, with "show earlier" fetching the previous ones?"""
    run_id = make_run(app)
    bulk_events(app, run_id, 450)
    page = client.get(f"/runs/{run_id}").text
    assert event_seqs(page) == list(range(251, 451))
    link = re.search(r'<li class="load-more" id="events-earlier">\s*<a href="([^"]+)"', page).group(1)
    assert link == f"/runs/{run_id}/events?before=251"

    fragment = htmx_client.get(link)
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert fragment.headers["Vary"].startswith("HX-Request")
    assert event_seqs(fragment.text) == list(range(51, 251))
    next_link = re.search(r'id="events-earlier">\s*<a href="([^"]+)"', fragment.text).group(1)
    last = htmx_client.get(next_link.replace("&amp;", "&"))
    assert event_seqs(last.text) == list(range(1, 51))
    assert "events-earlier" not in last.text

    full = client.get(link)  # no JavaScript: the page itself, at the older window
    assert "<html" in full.text and event_seqs(full.text) == list(range(51, 251))
    assert poll_element(full.text) is None and "Back to the latest events" in full.text


def test_active_run_page_ends_with_a_poll_element_and_finished_one_does_not(app, client, owner, make_experiment):
    """Does an active run's list end with a poll for events after its last seq, and a finished run's not?"""
    number = make_experiment()
    for status in ("queued", "running", "waiting", "awaiting_approval"):
        run_id = make_run(app, number, status=status, events=4)
        page = client.get(f"/runs/{run_id}").text
        element = poll_element(page)
        assert element, status
        assert f'hx-get="/runs/{run_id}/events?after=4"' in element
        assert f'hx-trigger="every {app.config["POLL_RUN_SECONDS"]}s"' in element
        assert 'hx-swap="outerHTML"' in element and "data-poll" in element
    for status in ("completed", "failed", "cancelled", "blocked"):
        run_id = make_run(app, number, status=status, events=2)
        page = client.get(f"/runs/{run_id}").text
        assert poll_element(page) is None and "hx-trigger=\"every" not in page, status
        assert "its events no longer update" in page
        assert "Cancel run" not in page


def test_run_without_events_polls_from_zero(app, client, owner):
    """Does a new run with no events say so and poll from seq 0?"""
    run_id = make_run(app, status="queued")
    page = client.get(f"/runs/{run_id}").text
    assert "No events yet." in page
    assert f"/runs/{run_id}/events?after=0" in poll_element(page)


# --- the poll protocol ---------------------------------------------------------------------

def test_poll_answers_204_without_body_when_nothing_is_new(app, htmx_client):
    """Is a poll with nothing new a bodiless 204 (the page keeps its poll element)?"""
    run_id = make_run(app, events=3)
    response = htmx_client.get(f"/runs/{run_id}/events?after=3")
    assert response.status_code == 204
    assert response.data == b""
    assert response.headers["Vary"].startswith("HX-Request")


def test_poll_returns_new_rows_and_a_fresh_poll_element(app, htmx_client):
    """Do new events come back as rows plus a poll element carrying the new cursor?"""
    run_id = make_run(app, events=3)
    add_events(app, run_id, ("assistant_text", "Fourth"), ("tool_call", "list_pods", {"tool": "list_pods", "input": {}}))
    response = htmx_client.get(f"/runs/{run_id}/events?after=3")
    assert response.status_code == 200
    assert "<html" not in response.text
    assert event_seqs(response.text) == [4, 5]
    assert "Fourth" in response.text and "list_pods" in response.text
    assert poll_url(response.text) == f"/runs/{run_id}/events?after=5"
    assert response.headers["HX-Trigger"] == "run-changed"
    assert response.headers["Vary"].startswith("HX-Request")
    # The next poll from the new cursor: nothing new again.
    assert htmx_client.get(poll_url(response.text)).status_code == 204


def test_poll_after_the_run_ended_returns_final_rows_without_a_trigger(app, htmx_client):
    """When the run ends, does the poll answer the last rows and no poll element, so polling stops?"""
    run_id = make_run(app, events=2)
    add_events(app, run_id, ("sdk_result", None, {"input_tokens": 10}), ("completed", "All done."),
               status="completed")
    response = htmx_client.get(f"/runs/{run_id}/events?after=2")
    assert response.status_code == 200
    assert event_seqs(response.text) == [3, 4] and "All done." in response.text
    assert poll_element(response.text) is None and "hx-get" not in response.text
    assert "This run ended (completed)" in response.text
    assert response.headers["HX-Trigger"] == "run-changed"
    # A late poll (say, a second tab) of an ended run with nothing new: still no trigger, not 204.
    late = htmx_client.get(f"/runs/{run_id}/events?after=4")
    assert late.status_code == 200 and poll_element(late.text) is None and event_seqs(late.text) == []


def test_poll_with_a_long_backlog_keeps_polling_until_it_caught_up(app, htmx_client):
    """If more than one batch is new when the run ended, does the answer keep a poll element for the rest?"""
    run_id = make_run(app)
    bulk_events(app, run_id, 700)
    add_events(app, run_id, status="completed")
    first = htmx_client.get(f"/runs/{run_id}/events?after=0")
    assert event_seqs(first.text) == list(range(1, 501))
    assert poll_url(first.text) == f"/runs/{run_id}/events?after=500"
    rest = htmx_client.get(poll_url(first.text))
    assert event_seqs(rest.text) == list(range(501, 701)) and poll_element(rest.text) is None


@pytest.mark.parametrize("query", ["after=-1", "after=abc", "after=1.5", "after=", "after=%EF%BC%91",
                                   "after=99999999999999999999", "", "after=1&before=5", "before=x"])
def test_bad_cursor_is_a_400_with_a_message(app, htmx_client, query):
    """Is an `after`/`before` that is not a non-negative whole number (or neither/both) a clear 400?"""
    run_id = make_run(app, events=1)
    response = htmx_client.get(f"/runs/{run_id}/events?{query}")
    assert response.status_code == 400
    assert "after" in response.headers["X-Sagan-Message"] or "before" in response.headers["X-Sagan-Message"]


def test_poll_from_a_non_htmx_request_gets_the_page(app, client, owner):
    """Does a reload of a poll URL (no HX-Request) get the whole page rather than a fragment?"""
    run_id = make_run(app, events=2)
    response = client.get(f"/runs/{run_id}/events?after=2")
    assert response.status_code == 200 and "<html" in response.text
    assert response.headers["Vary"].startswith("HX-Request")


@pytest.mark.parametrize("path", ["/runs/{id}", "/runs/{id}/header", "/runs/{id}/events?after=0",
                                  "/runs/{id}/events?before=5"])
def test_unknown_and_garbage_run_ids_are_404(app, client, htmx_client, path):
    """Do an unknown uuid and a garbage id answer 404, for the page and each fragment?"""
    for run_id in (str(uuid.uuid4()), "not-a-uuid", "1", "..%2F..%2Fetc"):
        for c in (client, htmx_client):
            response = c.get(path.format(id=run_id))
            assert response.status_code == 404, (path, run_id)
    cancel = htmx_client.post(f"/runs/{uuid.uuid4()}/cancel", headers={"X-CSRFToken": htmx_client.csrf})
    assert cancel.status_code == 404


def test_header_fragment_for_htmx_and_page_otherwise(app, client, htmx_client):
    """Does /runs/<id>/header answer the header alone to htmx (listening for run-changed) and the page to a browser?"""
    run_id = make_run(app, events=1)
    fragment = htmx_client.get(f"/runs/{run_id}/header")
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert fragment.text.lstrip().startswith("<section class=\"panel run-header\"")
    assert 'hx-trigger="run-changed from:body"' in fragment.text
    assert fragment.headers["Vary"].startswith("HX-Request")
    page = htmx_client.get(f"/runs/{run_id}/header", headers={"HX-Request": "false"})
    assert "<html" in page.text and 'id="events"' in page.text


# --- query budget --------------------------------------------------------------------------

def test_poll_runs_a_constant_number_of_queries(app, htmx_client):
    """Does the poll cost the same (≤3 queries) for a run with 10 events as for one with 1,000?"""
    small, large = make_run(app), make_run(app)
    bulk_events(app, small, 10)
    bulk_events(app, large, 1000)
    counts = {}
    for name, run_id, last in (("small", small, 10), ("large", large, 1000)):
        with counting_queries() as quiet:
            assert htmx_client.get(f"/runs/{run_id}/events?after={last}").status_code == 204
        add_events(app, run_id, ("assistant_text", "one more"), ("assistant_text", "and another"))
        with counting_queries() as busy:
            response = htmx_client.get(f"/runs/{run_id}/events?after={last}")
            assert event_seqs(response.text) == [last + 1, last + 2]
        counts[name] = (len(quiet), len(busy))
    assert counts["small"] == counts["large"], counts
    quiet, busy = counts["small"]
    assert quiet <= 2 and busy <= 3, counts


# --- cancel ---------------------------------------------------------------------------------

def _workflow_notes(app, number: int) -> list[tuple[str, str | None]]:
    with app.app_context():
        experiment = experiments.get_experiment(number)
        rows = db.session.scalars(sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id)
                                  .order_by(WorkflowEvent.created_at))
        return [(e.to_status, e.note) for e in rows]


def _experiment_status(app, number: int) -> str:
    with app.app_context():
        return db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number))


def test_cancel_a_queued_run_cancels_it_and_blocks_the_experiment(app, htmx_client, make_experiment):
    """Does Cancel on a queued run cancel it at once and block the experiment with "Run cancelled by owner"?"""
    number = make_experiment(status="implementing")
    run_id = make_run(app, number, status="queued")
    response = htmx_client.post(f"/runs/{run_id}/cancel", headers={"X-CSRFToken": htmx_client.csrf})
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<section class="panel run-header"')
    assert "run-status-cancelled" in response.text and "Cancel run" not in response.text
    assert 'id="your-turn"' in response.text and 'hx-swap-oob="true"' in response.text
    row = run_row(app, run_id)
    assert row["status"] == "cancelled" and row["failure_reason"] == "cancelled_by_owner"
    assert row["events"][-1] == ("cancelled", "Run cancelled by owner")
    assert _experiment_status(app, number) == "blocked"
    assert ("blocked", "Run cancelled by owner") in _workflow_notes(app, number)
    # The open page's next poll brings the cancelled event and ends polling.
    poll = htmx_client.get(f"/runs/{run_id}/events?after=0")
    assert "Run cancelled by owner" in poll.text and poll_element(poll.text) is None


def test_cancel_a_running_run_requests_a_cooperative_stop(app, htmx_client, make_experiment):
    """Does Cancel on a running run set cancel_requested_at and log a cancelled event, leaving it running?"""
    number = make_experiment(status="implementing")
    run_id = make_run(app, number, status="running", events=1)
    response = htmx_client.post(f"/runs/{run_id}/cancel", headers={"X-CSRFToken": htmx_client.csrf})
    assert response.status_code == 200
    assert "Cancel requested just now" in text(response) and "Cancel run" not in response.text
    row = run_row(app, run_id)
    assert row["status"] == "running" and row["cancel_requested_at"] is not None
    assert row["events"][-1][0] == "cancelled"
    assert _experiment_status(app, number) == "implementing"  # blocked once the loop stops


def test_cancel_a_finished_run_says_so_and_changes_nothing(app, htmx_client, make_experiment):
    """Does Cancel on a completed run answer a clear message (200, in place) and change nothing?"""
    number = make_experiment(status="implementing")
    run_id = make_run(app, number, status="completed", events=2)
    before = run_row(app, run_id)
    response = htmx_client.post(f"/runs/{run_id}/cancel", headers={"X-CSRFToken": htmx_client.csrf})
    assert response.status_code == 200
    message = re.search(r'<p class="error" role="alert">(.*?)</p>', text(response)).group(1)
    assert message == f"Run {run_id[:8]} already ended (completed); there is nothing to cancel."
    assert run_row(app, run_id) == before
    assert _experiment_status(app, number) == "implementing"


def test_cancel_without_javascript_redirects_to_the_run(app, client, owner, make_experiment):
    """Does the plain form post (no htmx) cancel and redirect back to the run page with 303?"""
    run_id = make_run(app, make_experiment(status="implementing"), status="queued")
    response = client.post(f"/runs/{run_id}/cancel", data={"csrf_token": owner.csrf()})
    assert response.status_code == 303 and response.headers["Location"] == f"/runs/{run_id}"
    assert run_row(app, run_id)["status"] == "cancelled"
    finished = client.post(f"/runs/{run_id}/cancel", data={"csrf_token": owner.csrf()})
    assert finished.status_code == 200 and "already ended (cancelled)" in text(finished)


def test_cancel_needs_csrf(app, htmx_client):
    """Is a cancel without a CSRF token refused, leaving the run as it was?"""
    run_id = make_run(app, status="queued")
    response = htmx_client.post(f"/runs/{run_id}/cancel")
    assert response.status_code == 400
    assert run_row(app, run_id)["status"] == "queued"


def test_cancel_button_asks_for_confirmation(app, client, owner):
    """Does the Cancel form carry a data-confirm question (answered by static/js/sagan.js)?"""
    run_id = make_run(app, status="running")
    form = re.search(r'<form[^>]*class="cancel-form".*?</form>', client.get(f"/runs/{run_id}").text, re.S).group(0)
    assert f'data-confirm="Cancel run {run_id[:8]}? It stops after its current step' in form
    assert 'name="csrf_token"' in form and f'hx-post="/runs/{run_id}/cancel"' in form


# --- the runs list and the experiment page --------------------------------------------------

def test_runs_list_is_newest_first_with_its_columns(app, client, owner, make_experiment):
    """Does /runs list runs newest first with kind, Run <id8>, agent, status, experiment, age, tokens/cost?"""
    number = make_experiment()
    older = make_run(app, number, kind="plan", agent="experiment-planner", status="completed",
                     input_tokens=1000, output_tokens=234, cost_usd=0.25)
    clock.advance(timedelta(minutes=5))
    newer = make_run(app, number, status="running")
    body = text(client.get("/runs"))
    rows = re.findall(r"<tr>\s*<td.*?</tr>", body, re.S)
    assert [re.search(r"Run (\w{8})</a>", r).group(1) for r in rows] == [newer[:8], older[:8]]
    assert ">plan<" in rows[1] and "experiment-planner" in rows[1] and "run-status-completed" in rows[1]
    assert f"#{number}</a>" in rows[1] and "5m ago" in rows[1] and "1,234 · $0.25" in rows[1]


def test_runs_list_filters_by_status_and_kind_and_answers_htmx_with_the_table(app, client, htmx_client, make_experiment):
    """Do the status and kind filters narrow the list, and an htmx request get only the table?"""
    number = make_experiment()
    plan_run = make_run(app, number, kind="plan", status="completed")
    apply_run = make_run(app, number, kind="apply", status="running")
    assert f"Run {plan_run[:8]}" in client.get("/runs?status=completed").text
    assert f"Run {apply_run[:8]}" not in client.get("/runs?status=completed").text
    fragment = htmx_client.get("/runs?kind=apply")
    assert fragment.text.lstrip().startswith('<div id="runs-table"')
    assert f"Run {apply_run[:8]}" in fragment.text and f"Run {plan_run[:8]}" not in fragment.text
    assert fragment.headers["Vary"].startswith("HX-Request")
    other = make_experiment("Another one")
    assert "No runs match" in client.get(f"/runs?experiment={other}").text
    assert "No runs match" in client.get("/runs?kind=qa").text
    assert client.get("/runs?status=nonsense").status_code == 200  # unknown filter values are dropped


def test_experiment_page_lists_its_runs(app, client, owner, make_experiment):
    """Does the experiment page's runs section (id="runs") list kind, run link, agent, status and age?"""
    number = make_experiment()
    empty = text(client.get(f"/experiments/{number}"))
    assert re.search(r'id="runs"><h2>Agent runs</h2><p class="empty">No runs yet.', empty)
    run_id = make_run(app, number, kind="plan", agent="experiment-planner", status="awaiting_approval")
    make_run(app, make_experiment("Elsewhere"), agent="someone-else")
    section = re.search(r'<section class="panel" id="runs">.*?</section>', text(client.get(f"/experiments/{number}")),
                        re.S).group(0)
    assert f'<a href="/runs/{run_id}">Run {run_id[:8]}</a>' in section
    assert "experiment-planner" in section and "run-status-awaiting_approval" in section and ">plan<" in section
    assert "someone-else" not in section


# --- access -----------------------------------------------------------------------------------

def test_run_routes_refuse_without_a_session(app, client, api_client):
    """Do the run pages and fragments refuse a browser without a session, htmx without one, and a token?"""
    run_id = make_run(app, status="queued")
    token_client = api_client("read,write,dispatch,promote")
    for method, path in (("GET", "/runs"), ("GET", f"/runs/{run_id}"), ("GET", f"/runs/{run_id}/header"),
                         ("GET", f"/runs/{run_id}/events?after=0"), ("POST", f"/runs/{run_id}/cancel")):
        plain = client.open(path, method=method)
        assert plain.status_code == 302 and plain.headers["Location"].startswith("/login"), path
        htmx = client.open(path, method=method, headers={"HX-Request": "true"})
        assert htmx.status_code == 401 and htmx.headers["HX-Redirect"].startswith("/login"), path
        assert token_client.open(path, method=method).status_code in (302, 401), path
    assert run_row(app, run_id)["status"] == "queued"
    rules = {name: getattr(view, "access_rule", None) for name, view in app.view_functions.items()}
    for endpoint in ("runs.index", "runs.detail", "runs.header", "runs.events", "runs.cancel"):
        assert rules[endpoint] == ("owner", None), endpoint
