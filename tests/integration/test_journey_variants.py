"""Journey variants (issue: end to end): pods that crash-loop are stopped, the run fails with the
evidence, exactly one automatic recovery relaunches them, and the experiment moves on."""
from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import tempfile
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import AgentRun, Pod, WorkflowEvent, db
from services.code import system_users
from services.core import clock
from services.core.actors import Actor
from services.dispatch import watcher
from services.dispatch.backends import local_network
from services.planning import approvals
from services.workflow import experiments, lifecycle, parking
from tests.fakes.anthropic_server import reply, text
from tests.integration.test_code_agents import Agents, _tool


def _plan(spec) -> str:
    sections = "\n\n".join(f"## {t}\n{t}." for t in (
        "Goal", "Hypothesis", "Prediction", "Kill Criterion", "Experimental Setup", "Compute and Hardware",
        "Artifacts", "Verification", "Risks and Red Team", "Likely Clean Result"))
    return f"{sections}\n\n## Approval Checklist\n- [x] ok\n\n```runpod-spec\n{json.dumps(spec)}\n```\n"


@pytest.mark.slow
def test_crash_loop_then_one_recovery_then_success(app, fake_anthropic, worker, live_server, make_experiment,
                                                    monkeypatch):
    """First dispatch: the container keeps restarting (three bootstraps) → pods stopped, the
    orchestrator fails crash_loop with the evidence → one recovery relaunches → the pods finish."""
    # Pods are sandboxed (a private /tmp, no view of the host's folders), so "crashed once
    # already?" is asked over loopback from a counter the test serves; pods reach nothing of
    # the host but their pod API, so the counter is let through the filter like one.
    calls = []

    class Counter(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            calls.append(self.path)
            body = b"first" if len(calls) == 1 else b"again"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    counter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=counter.serve_forever, daemon=True).start()
    pod_user = system_users.ensure_user(app.config["SAGAN_LOCAL_POD_USER"])
    local_network.check(pod_user.pw_uid if pod_user else None, [f"http://127.0.0.1:{counter.server_address[1]}/"])
    pods_dir = tempfile.mkdtemp(prefix="sagan-crash-pods-", dir="/tmp")
    os.chmod(pods_dir, 0o711)
    monkeypatch.setitem(app.config, "SAGAN_BASE_URL", live_server.url)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", pods_dir)
    # The first run "restarts" twice more (posting bootstrap again) then hangs; later runs succeed.
    script = f"""
import json, os, time, urllib.request
def post(body):
    req = urllib.request.Request(os.environ["SAGAN_PROGRESS_URL"], data=json.dumps(body).encode(),
        headers={{"Authorization": "Bearer " + os.environ["SAGAN_POD_PROGRESS_TOKEN"], "Content-Type": "application/json"}})
    urllib.request.urlopen(req, timeout=10)
if urllib.request.urlopen("http://127.0.0.1:{counter.server_address[1]}/attempt", timeout=10).read() == b"first":
    for seq in (900, 901):
        post({{"progressPct": 5, "milestone": "bootstrap", "seq": seq,
               "message": "bootstrap complete on branch main · err: ImportError: no module named probe"}})
    time.sleep(120)
d = os.environ["SAGAN_ARTIFACT_DIR"]; os.makedirs(d, exist_ok=True)
json.dump({{"accuracy": 0.9}}, open(os.path.join(d, "metrics.json"), "w"))
"""
    spec = {"name": "flaky", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 1,
            "keepAliveMinutes": 0,
            "dockerArgs": f"python3 -c 'import base64; exec(base64.b64decode(\"{base64.b64encode(script.encode()).decode()}\"))'",
            "config": {"command": "flaky", "artifacts": ["/workspace/sagan-artifacts/metrics.json"]}}
    agents = Agents(app)
    fake_anthropic.default = agents
    agents.script("experiment-orchestrator",
                  _tool("launch_pods"), _tool("wait_for_pods"),                          # the first run
                  _tool("launch_pods"), _tool("wait_for_pods"),                          # the recovery
                  _tool("post_marker", marker="epm:interpretation", note="Recovered; the owner reviews.",
                        next_status="reviewing"),
                  reply(text("Recovered.")))

    number = make_experiment("Flaky pods", status="planning", pod_account="local")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, _plan(spec), Actor("owner"), source="owner")
        effects = approvals.approve(submission.approval, Actor("owner"), confirm_unchecked=True)
        db.session.commit()
        lifecycle.run_side_effects(effects)
        experiment_id = experiment.id
    try:
        with app.app_context():
            first = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-orchestrator"))
            first_id = first.id

            def settle(until, seconds=90):
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    worker()
                    db.session.expire_all()
                    if until():
                        return
                    watcher.watch()
                    parking.wake_ready_runs()
                    time.sleep(0.3)
                raise AssertionError("the journey did not get there in time")

            settle(lambda: db.session.get(AgentRun, first_id).status == "failed")
            failed = db.session.get(AgentRun, first_id)
            assert failed.failure_reason == "crash_loop"
            assert "ImportError: no module named probe" in failed.last_error
            crashed_pod = db.session.scalar(sa.select(Pod).order_by(Pod.created_at).limit(1))
            assert crashed_pod.status == "stopped" and crashed_pod.stop_reason == "failure"
            recovery = db.session.scalar(sa.select(AgentRun).where(AgentRun.resumes_run_id == first_id))
            assert recovery is not None and recovery.status == "waiting"
            assert f"[auto-recovery-for:{first_id}]" in recovery.request

            clock.advance(timedelta(minutes=2))  # the recovery's back-off
            settle(lambda: db.session.get(AgentRun, recovery.id).status == "completed")
            assert experiments.get_experiment(number).status == "reviewing"  # handed to the owner
            assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
                AgentRun.agent == "experiment-orchestrator")) == 2  # one recovery, not a chain
            notes = [n for n in db.session.scalars(sa.select(WorkflowEvent.note).where(
                WorkflowEvent.entity_id == experiment_id)) if n]
            assert f"Automatic recovery queued after agent run {str(first_id)[:8]} failed." in notes
            assert "Uploads verified." in notes
        # The recovery parked on wait_for_pods, was woken and continued the same conversation:
        # its earlier turns went back exactly as the API sent them (signed thinking first), and
        # the update followed the parked call's result in the same user turn.
        woken = [b["messages"] for b in agents.requests["experiment-orchestrator"]
                 if isinstance(b["messages"][-1]["content"], list)
                 and any(c.get("text", "").startswith("Update while you waited") for c in b["messages"][-1]["content"])]
        assert woken
        sent = [m["content"] for m in woken[-1] if m["role"] == "assistant"]
        issued = [r["content"] for r in fake_anthropic.responses]
        assert len(sent) == 2 and all(turn in issued and turn[0]["type"] == "thinking" for turn in sent)
        assert woken[-1][-1]["content"][0]["type"] == "tool_result"
    finally:
        counter.shutdown()
        counter.server_close()
        shutil.rmtree(pods_dir, ignore_errors=True)


def _two_pods_approved(app, fake_anthropic, fake_runpod, make_experiment, monkeypatch, second_gpu: str,
                       title: str) -> int:
    """A two-pod spec (an A100, then `second_gpu`) approved on the team account, with an
    orchestrator scripted to launch the pods and wait; the experiment's number."""
    from services.dispatch import provisioner
    monkeypatch.setattr(provisioner, "sleep", fake_runpod.advance)
    pod = {"gpuCount": 1, "volumeGb": 10, "containerDiskGb": 10, "cloudType": "SECURE", "estimatedMinutes": 60,
           "dockerArgs": "bash -lc 'python train.py'"}
    spec = [{"name": "a", "gpuType": "A100", **pod}, {"name": "b", "gpuType": second_gpu, **pod}]
    agents = Agents(app)
    fake_anthropic.default = agents
    agents.script("experiment-orchestrator", _tool("launch_pods"), _tool("wait_for_pods"),
                  reply(text("should never be asked")))
    number = make_experiment(title, status="planning", pod_account="team")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, _plan(spec), Actor("owner"), source="owner")
        effects = approvals.approve(submission.approval, Actor("owner"), confirm_unchecked=True)
        db.session.commit()
        lifecycle.run_side_effects(effects)
    return number


def test_partial_dispatch_stops_survivors_and_blocks_without_retry(app, fake_anthropic, fake_runpod, worker,
                                                                   make_experiment, monkeypatch):
    """The orchestrator launches a two-pod spec; pod 2 has no capacity anywhere: the survivor is
    stopped, the experiment is blocked with the exact note, and nothing is retried."""
    fake_runpod.no_capacity("NVIDIA H100 80GB HBM3")
    number = _two_pods_approved(app, fake_anthropic, fake_runpod, make_experiment, monkeypatch, "H100",
                                "Four partitions, two shown")
    for _ in range(4):
        worker()
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
        assert note == ("Partial RunPod dispatch: 1/2 pods came up. Survivors were stopped because the plan was "
                        "designed around 2 partitions and proceeding with fewer would corrupt the result. "
                        "Re-approve the plan to retry.")
        survivor = db.session.scalar(sa.select(Pod).where(Pod.provider_pod_id.is_not(None)))
        assert survivor.status == "stopped" and fake_runpod.status_of(survivor.provider_pod_id) == "EXITED"
        orchestrator = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-orchestrator"))
        assert orchestrator.failure_reason == "partial_dispatch"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.resumes_run_id.is_not(None))) == 0
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "experiment")) == 1


@pytest.mark.slow
def test_a_pod_that_never_starts_is_a_partial_dispatch(app, fake_anthropic, fake_runpod, worker,
                                                        make_experiment, monkeypatch):
    """Both pods are created but one is still provisioning at the start deadline: the survivor is
    stopped, the experiment is blocked with the partial-dispatch note, and nothing is retried
    (SPEC §6.4.3) — the same as a pod that could not be created at all."""
    number = _two_pods_approved(app, fake_anthropic, fake_runpod, make_experiment, monkeypatch, "A100",
                                "Two partitions, one slow")
    for _ in range(3):
        worker()
    with app.app_context():
        pods = list(db.session.scalars(sa.select(Pod).order_by(Pod.run_index)))
        assert len(pods) == 2 and all(p.provider_pod_id for p in pods)
        fake_runpod.pods[pods[0].provider_pod_id].forced = "RUNNING"  # pod b stays PROVISIONING
    clock.advance(timedelta(seconds=app.config["POD_START_DEADLINE_SECONDS"] + 60))
    with app.app_context():
        watcher.watch()
        db.session.commit()
    for _ in range(3):
        worker()
    with app.app_context():
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
        assert note.startswith("Partial RunPod dispatch: 1/2 pods came up.") and note.endswith(
            "Re-approve the plan to retry.")
        orchestrator = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-orchestrator"))
        assert orchestrator.failure_reason == "partial_dispatch"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.resumes_run_id.is_not(None))) == 0
        assert {p.status for p in db.session.scalars(sa.select(Pod))} == {"stopped"}
