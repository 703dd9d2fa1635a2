"""A real research repository on a local pod: a plan written the old
system's way (`cd /workspace/<repo> && uv run python scripts/train.py --seed 0`) against a
small uv project, artifacts written under the repository's own run folder and declared as
a glob, uploaded and verified; and a private repository cloned with a deploy token that
appears in no stored text."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, Artifact, Pod, PodProgressPost, WorkflowEvent, db
from services.core import settings
from services.core.actors import Actor
from services.dispatch import provisioner, watcher
from services.workflow import experiments
from tests.fakes.git_http_server import HTTP_BACKEND, GitHttpServer
from tests.integration.test_local_dispatch import plan

TRAIN = '''import argparse, json, pathlib, sys
parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, required=True)
seed = parser.parse_args().seed
out = pathlib.Path("runs/factor_screen")
out.mkdir(parents=True, exist_ok=True)
(out / f"seed{seed}.json").write_text(json.dumps({"seed": seed, "in_venv": sys.prefix != sys.base_prefix}))
print("trained seed", seed)
'''


def make_repo(parent: Path, name: str, files: dict[str, str], *, bare_copy: bool = False) -> Path:
    """A git repository `name` under `parent` with `files` committed on main (readable by the pod user)."""
    work = parent / name
    work.mkdir(parents=True)
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "initial"], check=True)
    if bare_copy:
        bare = parent / f"{name}.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
        shutil.rmtree(work)
        work = bare
    subprocess.run(["chmod", "-R", "a+rX", str(parent)], check=True)
    return work


@pytest.fixture
def folders(app, live_server, monkeypatch):
    pods_dir = tempfile.mkdtemp(prefix="sagan-repo-pods-", dir="/tmp")
    os.chmod(pods_dir, 0o711)
    repos = Path(tempfile.mkdtemp(prefix="sagan-repos-", dir="/tmp"))
    repos.chmod(0o755)
    monkeypatch.setitem(app.config, "SAGAN_BASE_URL", live_server.url)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", pods_dir)
    yield Path(pods_dir), repos
    shutil.rmtree(pods_dir, ignore_errors=True)
    shutil.rmtree(repos, ignore_errors=True)


def run_local(app, make_approved, spec, timeout=240) -> tuple[str, int]:
    """Approve `spec` on the local account, dispatch it, watch until it settles; (status, number)."""
    number = make_approved(plan(spec), title="Research repo run", account="local")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run, _ = provisioner.launch(experiment, Actor("owner"))
        db.session.commit()
        assert provisioner.run_dispatch(run.id) == "dispatched", db.session.get(AgentRun, run.id).last_error
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            db.session.expire_all()
            status = experiments.get_experiment(number).status
            if status in ("interpreting", "blocked"):
                return status, number
            watcher.watch()
            time.sleep(0.5)
    raise AssertionError("the local pod did not settle in time")


def progress_messages(number) -> list[str]:
    experiment = experiments.get_experiment(number)
    return [m for m in db.session.scalars(sa.select(PodProgressPost.message).join(Pod, Pod.id == PodProgressPost.pod_id)
                                          .where(Pod.experiment_id == experiment.id)
                                          .order_by(PodProgressPost.created_at))]


@pytest.mark.slow
def test_an_old_style_uv_plan_runs_in_the_checkout_and_its_run_folder_is_uploaded(app, folders, make_approved):
    """`cd /workspace/explore-persona-space && uv run python scripts/train.py --seed 0`: the bootstrap
    installs uv with pip, runs `uv sync`, the script runs in the project's venv, and
    runs/factor_screen/*.json (declared relative to the checkout) is uploaded and verified."""
    _pods, repos = folders
    origin = make_repo(repos, "explore-persona-space", {
        "pyproject.toml": '[project]\nname = "explore-persona-space"\nversion = "0.1.0"\n'
                          'requires-python = ">=3.8"\ndependencies = []\n',
        "scripts/train.py": TRAIN})
    with app.app_context():
        settings.put("research_repo_url", str(origin))
        db.session.commit()
    spec = {"name": "screen", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 5,
            "keepAliveMinutes": 0,
            "dockerArgs": "cd /workspace/explore-persona-space && uv run python scripts/train.py --seed 0",
            "config": {"command": "factor screen", "artifacts": ["runs/factor_screen/*.json",
                                                                 "hf://org/persona-ckpt"]}}
    status, number = run_local(app, make_approved, spec)
    with app.app_context():
        messages = progress_messages(number)
        if status == "blocked" and any("setup failed: installing uv" in m for m in messages):
            pytest.skip(f"uv could not be installed from PyPI here: {messages[-1][:300]}")
        experiment = experiments.get_experiment(number)
        assert status == "interpreting", messages[-3:]
        artifact = db.session.scalar(sa.select(Artifact).where(Artifact.experiment_id == experiment.id,
                                                               Artifact.name == "runs/factor_screen/seed0.json"))
        assert artifact is not None and json.loads(artifact.content) == {"seed": 0, "in_venv": True}
        verification = db.session.scalar(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker == "epm:upload-verification"))
        rows = {r["declared"]: r for r in verification.metadata_["table"]["rows"]}
        assert rows["runs/factor_screen/*.json"]["status"] == "found"
        assert rows["runs/factor_screen/*.json"]["found"] == ["runs/factor_screen/seed0.json"]
        assert rows["hf://org/persona-ckpt"]["status"] == "not verified"
        log = db.session.scalar(sa.select(Artifact).where(Artifact.experiment_id == experiment.id,
                                                          Artifact.name.like("sagan-logs/%")))
        assert b"trained seed 0" in log.content


@pytest.mark.slow
def test_a_broken_lock_file_fails_setup_not_the_experiment(app, folders, make_approved):
    """A project whose environment cannot be built: "setup failed: uv sync" with the tail of uv's
    output, the dispatch fails `setup_failed`, and the script never runs."""
    _pods, repos = folders
    origin = make_repo(repos, "broken-env", {"pyproject.toml": "[project\nname = 'broken'\n",
                                             "scripts/train.py": TRAIN})
    with app.app_context():
        settings.put("research_repo_url", str(origin))
        db.session.commit()
    spec = {"name": "broken", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 5,
            "keepAliveMinutes": 0, "dockerArgs": "uv run python scripts/train.py --seed 0"}
    status, number = run_local(app, make_approved, spec)
    with app.app_context():
        messages = progress_messages(number)
        if any("setup failed: installing uv" in m for m in messages):
            pytest.skip(f"uv could not be installed from PyPI here: {messages[-1][:300]}")
        assert status == "blocked"
        assert messages[-1].startswith("setup failed: uv sync · err: "), messages[-1]
        run = db.session.scalar(sa.select(AgentRun).where(AgentRun.scope_id == experiments.get_experiment(number).id,
                                                          AgentRun.agent == provisioner.PROVISIONER))
        assert run.failure_reason == "setup_failed"
        assert not any("trained seed" in m for m in messages)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(HTTP_BACKEND), reason="git http-backend is not installed")
def test_a_private_repository_is_cloned_with_a_token_that_is_stored_nowhere(app, folders, make_approved,
                                                                            monkeypatch):
    """The owner names RESEARCH_REPO_TOKEN in Settings; the pod gets its value as a secret and git
    reads it through GIT_ASKPASS. The clone works, and the token is in no row of any table, in no
    file the pod left, and was never sent in a URL."""
    pods_dir, repos = folders
    token = "deploytoken-5f3a9c1e2b7d4e6f8a90"
    make_repo(repos, "private-research", {"train.sh": "mkdir -p \"$SAGAN_ARTIFACT_DIR\"; "
                                                      "echo cloned > \"$SAGAN_ARTIFACT_DIR/proof.txt\"\n"},
              bare_copy=True)
    monkeypatch.setenv("RESEARCH_REPO_TOKEN", token)
    with GitHttpServer(repos, token) as server:
        with app.app_context():
            settings.put("research_repo_url", f"{server.url}/private-research.git")
            settings.put("research_repo_token_env", "RESEARCH_REPO_TOKEN")
            db.session.commit()
        spec = {"name": "private", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1,
                "estimatedMinutes": 5, "keepAliveMinutes": 0,
                "dockerArgs": "cd /workspace/private-research && bash train.sh && env > /workspace/env-seen.txt",
                "config": {"artifacts": ["/workspace/sagan-artifacts/proof.txt"]}}
        status, number = run_local(app, make_approved, spec)
    assert any(r["authorized"] for r in server.requests), server.requests
    assert not any(token in r["path"] for r in server.requests)
    with app.app_context():
        assert status == "interpreting", progress_messages(number)[-3:]
        stored = []
        for table in db.metadata.sorted_tables:
            stored.append(repr(db.session.execute(sa.select(table)).all()))
        everything = "\n".join(stored)
        assert "cloned" in everything  # the artifact is there …
        assert token not in everything  # … and the token nowhere
    for path in pods_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert token.encode() not in path.read_bytes(), path
    env_seen = next(pods_dir.rglob("env-seen.txt")).read_text()
    # The experiment's own command never had it: the variable was unset after the clone.
    assert not any(line.startswith("RESEARCH_REPO_TOKEN=") for line in env_seen.splitlines())
