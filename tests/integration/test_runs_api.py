"""The runs JSON API (SPEC §9.2) and `sagan_state.py runs` (SPEC §9.4) against a live server."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from services.core import clock
from tests.integration.test_run_pages import add_events, make_run, run_row

CLI = Path(__file__).resolve().parents[2] / "scripts" / "sagan_state.py"


def _experiment_status(app, number):
    from services.workflow import experiments
    with app.app_context():
        return experiments.get_experiment(number).status


# --- GET /api/runs ------------------------------------------------------------------------

def test_list_runs_newest_first_filtered_by_experiment_and_status(app, api_client, make_experiment):
    """Does /api/runs list runs newest first, filtered by experiment (number or uuid) and status?"""
    client = api_client("read")
    number, other = make_experiment(), make_experiment("Other")
    first = make_run(app, number, status="completed")
    clock.advance(timedelta(seconds=5))
    second = make_run(app, number, status="running")
    elsewhere = make_run(app, other, status="running")

    listed = client.get("/api/runs").get_json()["runs"]
    assert [r["id"] for r in listed] == [elsewhere, second, first]
    assert {"id", "kind", "agent", "status", "request", "scopeId", "inputTokens", "costUsd", "lastSeq"} <= set(listed[0])

    by_number = client.get(f"/api/runs?experiment={number}").get_json()["runs"]
    assert [r["id"] for r in by_number] == [second, first]
    experiment_uuid = by_number[0]["scopeId"]
    assert [r["id"] for r in client.get(f"/api/runs?experiment={experiment_uuid}").get_json()["runs"]] == [second, first]
    running = client.get(f"/api/runs?experiment={number}&status=running").get_json()["runs"]
    assert [r["id"] for r in running] == [second]
    assert len(client.get("/api/runs?limit=1").get_json()["runs"]) == 1


@pytest.mark.parametrize("query, status, code", [
    ("status=nonsense", 400, "invalid_input"),
    ("limit=0", 400, "invalid_input"),
    ("limit=abc", 400, "invalid_input"),
    ("limit=201", 400, "invalid_input"),
    ("experiment=424242", 404, "not_found"),
    ("experiment=not-a-uuid", 404, "not_found"),
])
def test_list_runs_errors_are_json(app, api_client, query, status, code):
    """Are bad filters answered in the JSON error shape with the right status?"""
    response = api_client("read").get(f"/api/runs?{query}")
    assert response.status_code == status
    body = response.get_json()
    assert body["error"] == code and body["message"]


# --- GET /api/runs/<id> -------------------------------------------------------------------

def test_get_run_with_events_and_after_cursor(app, api_client, make_experiment):
    """Does /api/runs/<id> answer {run, events}, and `after` return only the newer events?"""
    client = api_client("read")
    run_id = make_run(app, make_experiment(), events=[
        ("started", "kind=apply", {"agent": "experiment-orchestrator"}),
        ("tool_call", "get_experiment", {"tool": "get_experiment", "input": {"number": 1}}),
        ("assistant_text", "Looking at the plan.", None)])
    body = client.get(f"/api/runs/{run_id}").get_json()
    assert body["run"]["id"] == run_id and body["run"]["status"] == "running" and body["run"]["lastSeq"] == 3
    assert [(e["seq"], e["eventType"]) for e in body["events"]] == [(1, "started"), (2, "tool_call"),
                                                                    (3, "assistant_text")]
    assert body["events"][1]["metadata"] == {"tool": "get_experiment", "input": {"number": 1}}
    assert body["nextAfter"] is None
    newer = client.get(f"/api/runs/{run_id}?after=2").get_json()
    assert [e["seq"] for e in newer["events"]] == [3]
    assert client.get(f"/api/runs/{run_id}?after=3").get_json()["events"] == []
    paged = client.get(f"/api/runs/{run_id}?limit=2").get_json()
    assert [e["seq"] for e in paged["events"]] == [1, 2] and paged["nextAfter"] == 2


@pytest.mark.parametrize("path, status, code", [
    ("/api/runs/{id}?after=-1", 400, "invalid_input"),
    ("/api/runs/{id}?after=x", 400, "invalid_input"),
    ("/api/runs/{id}?limit=5000", 400, "invalid_input"),
    ("/api/runs/00000000-0000-4000-8000-000000000001", 404, "not_found"),
    ("/api/runs/garbage", 404, "not_found"),
])
def test_get_run_errors_are_json(app, api_client, path, status, code):
    """Are a bad cursor and an unknown or garbage id answered in the JSON error shape?"""
    run_id = make_run(app, events=1)
    response = api_client("read").get(path.format(id=run_id))
    assert response.status_code == status
    assert response.get_json()["error"] == code and response.get_json()["message"]


# --- POST /api/runs/<id>/cancel -------------------------------------------------------------

def test_cancel_through_the_api_blocks_the_experiment(app, api_client, make_experiment):
    """Does POST /api/runs/<id>/cancel cancel a queued run and block its experiment, like the button?"""
    number = make_experiment(status="implementing")
    run_id = make_run(app, number, status="queued")
    response = api_client("read,write").post(f"/api/runs/{run_id}/cancel")
    assert response.status_code == 200
    body = response.get_json()
    assert body["ok"] is True and body["cancelled"] is True and body["run"]["status"] == "cancelled"
    assert run_row(app, run_id)["status"] == "cancelled"
    assert _experiment_status(app, number) == "blocked"


def test_cancel_a_running_run_through_the_api_asks_it_to_stop(app, api_client, make_experiment):
    """Does cancelling a running run answer that it stops after its current step?"""
    run_id = make_run(app, make_experiment(status="implementing"), status="running")
    body = api_client("read,write").post(f"/api/runs/{run_id}/cancel").get_json()
    assert body["cancelled"] is False and "after its current step" in body["message"]
    assert run_row(app, run_id)["cancel_requested_at"] is not None


def test_cancel_errors_are_json_and_change_nothing(app, api_client, make_experiment, client):
    """Are a finished run (409), a read-only token (403), no token (401) and an unknown run (404) refused?"""
    finished = make_run(app, make_experiment(status="implementing"), status="completed", events=1)
    before = run_row(app, finished)
    response = api_client("read,write").post(f"/api/runs/{finished}/cancel")
    assert response.status_code == 409
    assert response.get_json()["error"] == "run_ended"
    assert "already ended (completed)" in response.get_json()["message"]
    assert run_row(app, finished) == before

    queued = make_run(app, status="queued")
    assert api_client("read").post(f"/api/runs/{queued}/cancel").status_code == 403
    assert client.post(f"/api/runs/{queued}/cancel").status_code == 401
    assert api_client("read,write").post(f"/api/runs/{uuid.uuid4()}/cancel").status_code == 404
    assert run_row(app, queued)["status"] == "queued"


def test_runs_api_refuses_without_credentials(app, client):
    """Do the runs API routes answer 401 JSON with neither a session nor a token?"""
    run_id = make_run(app, status="queued")
    for method, path in (("GET", "/api/runs"), ("GET", f"/api/runs/{run_id}"),
                         ("POST", f"/api/runs/{run_id}/cancel")):
        response = client.open(path, method=method)
        assert response.status_code == 401 and response.get_json()["error"] == "unauthorized", path
    rules = {name: getattr(view, "access_rule", None) for name, view in app.view_functions.items()}
    assert rules["api.list_runs"] == ("api", "read")
    assert rules["api.get_run"] == ("api", "read")
    assert rules["api.cancel_run"] == ("api", "write")


# --- the CLI --------------------------------------------------------------------------------

@pytest.fixture
def cli(live_server, api_client):
    """Run scripts/sagan_state.py as a stdlib-only subprocess against the live server."""
    token = api_client("read,write").secret

    def run(*args, base_url=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAN_")}
        env["SAGAN_BASE_URL"] = base_url or live_server.url
        env["SAGAN_API_TOKEN"] = token
        return subprocess.run([sys.executable, "-I", str(CLI), *args], capture_output=True, text=True,
                              env=env, timeout=60)
    return run


def test_cli_runs_lists_and_filters(app, cli, make_experiment):
    """Does `runs` print JSON when piped, filtered by --experiment and --status?"""
    number, other = make_experiment(), make_experiment("Other")
    done = make_run(app, number, status="completed")
    running = make_run(app, number, status="running")
    make_run(app, other, status="running")
    out = cli("runs", "--experiment", str(number))
    assert out.returncode == 0, out.stderr
    assert {r["id"] for r in json.loads(out.stdout)["runs"]} == {done, running}
    only = json.loads(cli("runs", "--experiment", str(number), "--status", "running", "--json").stdout)
    assert [r["id"] for r in only["runs"]] == [running]


def test_cli_runs_show_prints_the_run_and_events_after_a_seq(app, cli):
    """Does `runs show RUN_ID --after SEQ` print the run and only the newer events?"""
    run_id = make_run(app, events=3)
    add_events(app, run_id, ("completed", "Finished the sweep."), status="completed")
    out = cli("runs", "show", run_id, "--after", "2")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["run"]["status"] == "completed"
    assert [e["seq"] for e in data["events"]] == [3, 4] and data["events"][-1]["body"] == "Finished the sweep."


def test_cli_runs_errors(app, cli):
    """Is an unknown run exit 1 with the server's message, a bad status exit 1, and no server exit 2 in one line?"""
    missing = cli("runs", "show", str(uuid.uuid4()))
    assert missing.returncode == 1 and "error 404 not_found: No such run." in missing.stderr
    bad = cli("runs", "--status", "nonsense")
    assert bad.returncode == 1 and "Unknown run status 'nonsense'" in bad.stderr
    down = cli("runs", base_url="http://127.0.0.1:9")
    assert down.returncode == 2
    assert down.stderr.strip().count("\n") == 0 and "cannot reach Sagan at http://127.0.0.1:9" in down.stderr


def test_cli_runs_cancel(app, cli, make_experiment):
    """Does `runs cancel RUN_ID` cancel a queued run, and refuse a finished one with exit 1?"""
    run_id = make_run(app, make_experiment(status="implementing"), status="queued")
    out = cli("runs", "cancel", run_id)
    assert out.returncode == 0, out.stderr
    assert f"Run {run_id[:8]} cancelled." in out.stdout
    again = cli("runs", "cancel", run_id)
    assert again.returncode == 1 and "error 409 run_ended" in again.stderr


def test_cli_help_documents_runs(cli):
    """Does --help name `runs`, and `runs --help` explain show and cancel?"""
    assert "runs" in cli("--help").stdout
    runs_help = " ".join(cli("runs", "--help").stdout.split())
    assert "runs show RUN_ID [--after SEQ]" in runs_help and "runs cancel RUN_ID" in runs_help
