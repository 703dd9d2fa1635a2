"""A real tiny experiment on the `local` backend: a Python one-liner posts progress, writes a
metrics JSON and an SVG figure into $SAGAN_ARTIFACT_DIR and exits; the bootstrap uploads them;
the watcher moves the experiment on and upload verification passes."""
from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import time

import pytest
import sqlalchemy as sa

from models import Artifact, Pod, PodProgressPost, WorkflowEvent, db
from services.core.actors import Actor
from services.dispatch import provisioner, watcher
from services.workflow import experiments

SCRIPT = (
    "import json, os, urllib.request; d = os.environ['SAGAN_ARTIFACT_DIR']; os.makedirs(d, exist_ok=True); "
    "req = urllib.request.Request(os.environ['SAGAN_PROGRESS_URL'], data=json.dumps({'progressPct': 50, "
    "'message': 'halfway', 'seq': 500, 'metrics': {'loss': 0.5}}).encode(), headers={'Authorization': "
    "'Bearer ' + os.environ['SAGAN_POD_PROGRESS_TOKEN'], 'Content-Type': 'application/json'}); "
    "urllib.request.urlopen(req); "
    "json.dump({'accuracy': 0.93, 'seed': 1}, open(os.path.join(d, 'metrics.json'), 'w')); "
    "open(os.path.join(d, 'figure.svg'), 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\" "
    "viewBox=\"0 0 10 10\"><circle cx=\"5\" cy=\"5\" r=\"4\"><title>accuracy 0.93</title></circle></svg>')"
)


def plan(spec) -> str:
    sections = "\n\n".join(f"## {t}\n{t}." for t in (
        "Goal", "Hypothesis", "Prediction", "Kill Criterion", "Experimental Setup", "Compute and Hardware",
        "Artifacts", "Verification", "Risks and Red Team", "Likely Clean Result"))
    return f"{sections}\n\n## Approval Checklist\n- [x] ok\n\n```runpod-spec\n{json.dumps(spec)}\n```\n"


@pytest.mark.slow
def test_local_pod_runs_a_real_script_end_to_end(app, live_server, make_approved, tmp_path, monkeypatch):
    """Dispatch → progress → artifacts → exit 0 → uploading → verifying → interpreting."""
    monkeypatch.setitem(app.config, "SAGAN_BASE_URL", live_server.url)
    # Local pods run as `nobody` when the tests run as root: the pods folder must be reachable.
    pods_dir = tempfile.mkdtemp(prefix="sagan-local-pods-", dir="/tmp")
    os.chmod(pods_dir, 0o711)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", pods_dir)
    spec = {"name": "tiny", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 1,
            "keepAliveMinutes": 0,
            # base64 keeps the one-liner clear of shell quoting.
            "dockerArgs": f"python3 -c 'import base64; exec(base64.b64decode(\"{base64.b64encode(SCRIPT.encode()).decode()}\"))'",
            "config": {"command": "a tiny real run", "artifacts": ["/workspace/sagan-artifacts/metrics.json",
                                                                  "/workspace/sagan-artifacts/figure.svg"]}}
    number = make_approved(plan(spec), title="Local tiny run", account="local")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run, _ = provisioner.launch(experiment, Actor("owner"))
        db.session.commit()
        outcome = provisioner.run_dispatch(run.id)
        from models import AgentRun
        assert outcome == "dispatched", db.session.get(AgentRun, run.id).last_error
        pod_id = db.session.scalar(sa.select(Pod.id).where(Pod.agent_run_id == run.id))
        pod_name = db.session.scalar(sa.select(Pod.name).where(Pod.id == pod_id))

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            db.session.expire_all()
            if experiments.get_experiment(number).status in ("interpreting", "blocked"):
                break
            watcher.watch()
            time.sleep(0.5)
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        notes = [e.note for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id).order_by(WorkflowEvent.created_at))]
        assert experiment.status == "interpreting", notes[-5:]
        messages = [p.message for p in db.session.scalars(
            sa.select(PodProgressPost).where(PodProgressPost.pod_id == pod_id).order_by(PodProgressPost.created_at))]
        assert messages[0].startswith("bootstrap complete") or "bootstrap complete" in messages[0]
        assert "halfway" in messages and messages[-1] == "experiment finished"
        names = sorted(db.session.scalars(sa.select(Artifact.name).where(Artifact.experiment_id == experiment.id)))
        # … and the pod's log, which outlives the pod.
        assert names == ["figure.svg", "metrics.json", f"sagan-logs/{pod_name}.log"]
        assert "Uploads verified." in notes
        # Honest labels: a local pod is not RunPod's.
        assert "Local pod dispatched; waiting for runtime." in notes and "Local pod is running." in notes
        assert not any((note or "").startswith("RunPod pod") for note in notes)
        pod = db.session.get(Pod, pod_id)
        assert pod.exit_code == 0 and float(pod.cost_per_hr or 0) == 0.0
    shutil.rmtree(pods_dir, ignore_errors=True)
