"""scripts/sagan_state.py against a live server, run as a real `python3` subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "scripts" / "sagan_state.py"


@pytest.fixture
def cli(live_server, api_client):
    """Run the CLI with a read/write token against the live server; returns CompletedProcess."""
    token = api_client("read,write").secret

    def run(*args, token_override=None, base_url=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAN_")}
        env["SAGAN_BASE_URL"] = base_url or live_server.url
        env["SAGAN_API_TOKEN"] = token_override if token_override is not None else token
        # A system python3 with the standard library only: the CLI must need nothing else.
        return subprocess.run([sys.executable, "-I", str(CLI), *args], capture_output=True, text=True,
                              env=env, timeout=60)
    return run


def test_help_lists_commands_and_choices(cli):
    """Does --help name every subcommand, and marker --help the review choices?"""
    out = cli("--help")
    assert out.returncode == 0
    for command in ("list", "view", "status", "patch", "marker", "markers", "events"):
        assert command in out.stdout
    marker_help = cli("marker", "--help").stdout
    assert "needs_targeted_fix" in marker_help and "code_review" in marker_help


def test_list_and_view_json_when_piped(cli, make_experiment):
    """Do list and view print JSON when stdout is not a terminal (agents parse it)?"""
    number = make_experiment("Probe seeds")
    listed = json.loads(cli("list").stdout)
    assert listed["experiments"][0]["number"] == number
    viewed = json.loads(cli("view", str(number)).stdout)
    assert viewed["experiment"]["title"] == "Probe seeds" and "events" in viewed


def test_view_summary_forced(cli, make_experiment):
    """Does --summary print the compact human summary even when piped?"""
    number = make_experiment("Probe seeds")
    out = cli("view", str(number), "--summary")
    assert out.returncode == 0
    assert out.stdout.startswith(f"#{number} Probe seeds")
    assert "Sagan turn: clarify scope" in out.stdout


def test_status_moves_and_refusal_is_exit_1(cli, make_experiment):
    """Does `status` move an experiment, and a refused move print the server's reason with exit 1?"""
    number = make_experiment(status="code_reviewing")
    ok = cli("status", str(number), "implementing", "--note", "Orchestrator queued")
    assert ok.returncode == 0, ok.stderr
    assert f"#{number} is now implementing" in ok.stdout
    refused = cli("status", str(number), "shared")
    assert refused.returncode == 1
    assert "cannot move from implementing to shared" in refused.stderr


def test_marker_with_review_fields_and_unknown_marker(cli, make_experiment):
    """Does the review-marker invocation of the issue work, and epm:nonsense get a clear 422 line?"""
    number = make_experiment(status="code_reviewing")
    ok = cli("marker", str(number), "epm:code-review", "--review-pair", "code_review", "--round", "1",
             "--reviewer", "code-reviewer", "--verdict", "needs_targeted_fix",
             "--required-fix", "pool p-values with Fisher")
    assert ok.returncode == 0, ok.stderr
    assert "epm:code-review recorded" in ok.stdout
    events = json.loads(cli("events", str(number), "--marker", "epm:code-review").stdout)["events"]
    assert events[0]["metadata"]["review"]["required_fix"] == "pool p-values with Fisher"
    bad = cli("marker", str(number), "epm:nonsense")
    assert bad.returncode == 1
    assert 'error 422 unknown_marker_type: Marker "epm:nonsense" is not a known marker.' in bad.stderr
    alias = cli("markers", str(number), "epm:test-verdict", "--note", "all green")
    assert alias.returncode == 0


def test_marker_next_status_and_bad_metadata_json(cli, make_experiment):
    """Does --next-status move the experiment, and bad --metadata-json fail locally (exit 2)?"""
    number = make_experiment(status="code_reviewing")
    moved = cli("marker", str(number), "epm:code-review", "--review-pair", "code_review", "--round", "2",
                "--reviewer", "code-reviewer", "--verdict", "pass", "--next-status", "testing")
    assert moved.returncode == 0, moved.stderr
    view = json.loads(cli("view", str(number)).stdout)
    assert view["experiment"]["status"] == "testing"
    bad = cli("marker", str(number), "epm:preflight", "--metadata-json", "{oops")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr


def test_patch_and_events_filters(cli, make_experiment):
    """Do patch and the events filters (type, since) work?"""
    number = make_experiment()
    out = cli("patch", str(number), "--title", "Renamed", "--tags", "a,b")
    assert out.returncode == 0, out.stderr
    view = json.loads(cli("view", str(number)).stdout)
    assert view["experiment"]["title"] == "Renamed" and view["experiment"]["tags"] == ["a", "b"]
    notes = json.loads(cli("events", str(number), "--type", "note").stdout)["events"]
    assert {e["eventType"] for e in notes} == {"note"}
    assert cli("patch", str(number)).returncode == 2


def test_connection_error_is_one_line_exit_2(cli):
    """Does an unreachable server print one line naming the URL and SAGAN_BASE_URL, exit 2?"""
    out = cli("view", "192", base_url="http://127.0.0.1:9")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cannot reach Sagan at http://127.0.0.1:9:")
    assert lines[0].endswith("set SAGAN_BASE_URL")


def test_bad_token_prints_server_message(cli, make_experiment):
    """Does a wrong token print the server's 401 message with exit 1?"""
    number = make_experiment()
    out = cli("view", str(number), token_override="sk_wrong")
    assert out.returncode == 1
    assert "invalid_token" in out.stderr


def test_upload_artifact_as_the_pod_and_its_budget_refusal(cli, make_live_pod, tmp_path, app, monkeypatch):
    """Does `upload-artifact` store a file with the pod's token, print the server's 413 naming the
    budget (exit 1) when the pod's budget is passed, and `artifacts` list what is stored against
    the experiment's budget?"""
    monkeypatch.setitem(app.config, "ARTIFACT_POD_MAX_BYTES", 1000)
    pod = make_live_pod("CLI upload")
    small, big = tmp_path / "metrics.json", tmp_path / "big.txt"
    small.write_text('{"loss": 0.5}')
    big.write_text("x" * 2000)
    stored = cli("upload-artifact", str(small), "--name", "results/metrics.json", "--pod-token", pod.secret)
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout.strip() == "stored results/metrics.json: 13 bytes"
    refused = cli("upload-artifact", str(big), "--pod-token", pod.secret)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error 413 artifact_budget: big.txt would take this pod's artifacts past "
                                     "their budget of 1,000 bytes (SAGAN_ARTIFACT_POD_MAX_BYTES)")
    assert cli("upload-artifact", str(tmp_path / "missing.txt"), "--pod-token", pod.secret).returncode == 2
    listing = json.loads(cli("artifacts", str(pod.number)).stdout)
    assert [(a["name"], a["status"]) for a in listing["artifacts"]] == [("results/metrics.json", "ready")]
    assert listing["usage"]["files"] == 1 and listing["usage"]["bytes"] == 13
