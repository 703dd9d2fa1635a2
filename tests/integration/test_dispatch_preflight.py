"""Preflight (services/dispatch/preflight.py): what a dispatch must pass before any pod is
created. Against the loopback RunPod fake and a real research repository (a bare git origin
on disk): a script missing at the commit, a secret not configured, a commit that was never
pushed, a GPU without a price and an estimate over the cap are each refused before any
create call, with a reason the owner can act on, on the timeline and on the run."""
from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from models import AgentRun, RunEvent, WorkflowEvent, db
from services.core import settings
from services.dispatch import pod_secrets
from services.dispatch.preflight import Entry, entry_points
from services.workflow import experiments
from tests.fakes.git_http_server import HTTP_BACKEND, GitHttpServer
from tests.integration import code_fixtures
from tests.integration import test_dispatch as base
from tests.integration.code_fixtures import git
from tests.integration.test_dispatch import dispatch, pod_spec
from tests.integration.test_local_research_repo import make_repo

# The fake RunPod and the approved-experiment factory of the dispatch tests, and the code
# tests' research repository, shared as fixtures.
runpod = base.runpod
approved = base.approved
research_repo = code_fixtures.research_repo


def creates(fake):
    return [r for r in fake.requests_to("POST") if r.path.rstrip("/") == "/v2/pods"]


def _preflight_of(number) -> tuple[WorkflowEvent, RunEvent, AgentRun]:
    """The experiment's epm:preflight marker, its dispatch run's preflight event, and the run."""
    experiment = experiments.get_experiment(number)
    marker = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id,
                                                               WorkflowEvent.marker == "epm:preflight"))
    run = db.session.scalar(sa.select(AgentRun).where(AgentRun.scope_id == experiment.id,
                                                      AgentRun.kind == "experiment"))
    event = db.session.scalar(sa.select(RunEvent).where(RunEvent.run_id == run.id, RunEvent.event_type == "preflight"))
    return marker, event, run


def _blocked_note(number) -> str:
    experiment = experiments.get_experiment(number)
    assert experiment.status == "blocked"
    return db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.entity_id == experiment.id,
                                                                 WorkflowEvent.to_status == "blocked"))


def _refused(app, runpod, number, check: str) -> str:
    """Dispatch; assert the preflight refused it on `check` before any create call; the note."""
    dispatch(app, number)
    assert creates(runpod) == []
    with app.app_context():
        marker, event, run = _preflight_of(number)
        assert marker.metadata_["verdict"] == "fail" and event.metadata_["verdict"] == "fail"
        failed = [c["name"] for c in marker.metadata_["checks"] if not c["ok"]]
        assert check in failed, marker.metadata_
        assert run.status == "failed" and run.failure_reason == "preflight_failed"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 1  # no recovery
        return _blocked_note(number)


def test_a_script_missing_at_the_commit_is_refused_before_any_pod(app, client, owner, runpod, approved,
                                                                  research_repo):
    """The command runs train.py, which the repository does not have at the commit the pods
    check out: no create call; the experiment is blocked saying which script, where; the
    verdict is on the timeline and on the run tree."""
    number = approved(pod_spec(dockerArgs="bash -lc 'python train.py --seed 1'"))
    note = _refused(app, runpod, number, "entry_script")
    assert "the entry script train.py does not exist at" in note and note.startswith("Preflight refused the dispatch")
    page = client.get(f"/experiments/{number}").text
    assert "preflight failed" in page and "Preflight" in page


def test_a_secret_that_is_not_configured_is_refused_before_any_pod(app, runpod, approved, research_repo,
                                                                   monkeypatch):
    """The spec names HF_TOKEN, allowed by the owner but not set in the server's environment:
    the pod would start without it. Refused before any create call, naming the secret."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with app.app_context():
        pod_secrets.update_allowlist("HF_TOKEN")
        db.session.commit()
    number = approved(pod_spec(dockerArgs="python run.py", secrets=["HF_TOKEN"]))
    note = _refused(app, runpod, number, "secrets")
    assert "HF_TOKEN is not set in the server's environment" in note


def test_a_commit_that_was_never_pushed_is_refused(app, runpod, approved, research_repo):
    """The experiment names a commit the remote does not have: refused, saying so."""
    number = approved(pod_spec(dockerArgs="python run.py"))
    with app.app_context():
        experiments.get_experiment(number).git_commit = "0123456789abcdef0123456789abcdef01234567"
        db.session.commit()
    note = _refused(app, runpod, number, "commit")
    assert "commit 0123456789ab is not on the remote" in note


def test_a_gpu_without_a_price_and_an_estimate_over_the_cap_are_refused(app, runpod, approved):
    """The policy lets the pod move to an L40S, which has no price; the cap is below the estimate.
    Both reasons are in the one blocker note (no research repository: no code to check)."""
    number = approved(pod_spec(substitution_policy={"gpuType": {"allowed": ["A100", "L40S"]}}))
    with app.app_context():
        experiments.get_experiment(number).cost_cap_usd = 0.50  # an hour of an A100 is $1.49
        db.session.commit()
    note = _refused(app, runpod, number, "gpu_prices")
    assert "no known price for L40S" in note and "is over the cost cap of $0.50" in note
    with app.app_context():
        marker, _, _ = _preflight_of(number)
        assert {c["name"]: c["ok"] for c in marker.metadata_["checks"]} == {
            "commit": True, "entry_script": True, "gpu_prices": False, "secrets": True, "estimate": False}


def test_a_dispatch_that_passes_preflight_creates_its_pods(app, runpod, approved, research_repo, monkeypatch):
    """run.py exists on main, the secret is set, A100 has a price: the marker says pass, and the
    pods are created as before."""
    monkeypatch.setenv("HF_TOKEN", "hf_test_value")
    with app.app_context():
        pod_secrets.update_allowlist("HF_TOKEN")
        db.session.commit()
    number = approved(pod_spec(dockerArgs="cd $SAGAN_REPO_DIR && python3 run.py", secrets=["HF_TOKEN"]))
    dispatch(app, number)
    assert len(creates(runpod)) == 1
    with app.app_context():
        marker, event, run = _preflight_of(number)
        assert marker.metadata_["verdict"] == "pass" and event.body.startswith("Preflight passed (5 checks)")
        assert "the entry script is there (run.py)" in marker.note
        assert experiments.get_experiment(number).status == "queued" and run.status == "waiting"


def test_a_branch_pushed_later_is_seen_because_the_remote_is_fetched_first(app, runpod, approved, research_repo):
    """The pods run the experiment's branch, pushed to the remote after Sagan's clone was made:
    the preflight fetches before it looks, so the branch and its new script are found."""
    number = approved(pod_spec(dockerArgs="python sweep.py"))
    # Sagan's clone is made (and fetched) by a first preflight, which refuses: no sweep.py yet.
    dispatch(app, number)
    work = research_repo.base / "pusher"
    git("clone", "--quiet", str(research_repo.origin), str(work))
    (work / "sweep.py").write_text("print('sweep')\n")
    git("checkout", "--quiet", "-b", "experiment-late", cwd=work)
    git("add", "sweep.py", cwd=work)
    git("commit", "--quiet", "-m", "sweep", cwd=work)
    git("push", "--quiet", "origin", "experiment-late", cwd=work)
    second = approved(pod_spec(dockerArgs="python sweep.py"), title="Second")
    with app.app_context():
        experiments.get_experiment(second).git_branch = "experiment-late"
        db.session.commit()
    dispatch(app, second)
    assert len(creates(runpod)) == 1


@pytest.mark.skipif(not os.path.exists(HTTP_BACKEND), reason="git http-backend is not installed")
def test_a_private_repository_is_read_with_its_deploy_token(app, runpod, approved, monkeypatch, tmp_path):
    """The research repository is served over HTTP and wants the deploy token the owner named for
    the pods: the preflight fetches it with that token (never in a URL), finds run.py and not
    train.py at the default branch."""
    token = "deploytoken-preflight-4c1d"
    repos = tmp_path / "repos"
    repos.mkdir()
    make_repo(repos, "private-research", {"run.py": "print('run')\n"}, bare_copy=True)
    monkeypatch.setenv("RESEARCH_REPO_TOKEN", token)
    monkeypatch.setitem(app.config, "SAGAN_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    with GitHttpServer(repos, token) as server:
        with app.app_context():
            settings.put("research_repo_url", f"{server.url}/private-research.git")
            settings.put("research_repo_token_env", "RESEARCH_REPO_TOKEN")
            db.session.commit()
        missing = approved(pod_spec(dockerArgs="python train.py"))
        note = _refused(app, runpod, missing, "entry_script")
        assert "the entry script train.py does not exist at" in note
        present = approved(pod_spec(dockerArgs="python run.py"), title="Present")
        dispatch(app, present)
    assert len(creates(runpod)) == 1
    assert any(r["authorized"] for r in server.requests) and not any(token in r["path"] for r in server.requests)
    stored = [p.read_bytes() for p in (tmp_path / "workspaces").rglob("*") if p.is_file() and not p.is_symlink()]
    assert not any(token.encode() in content for content in stored)


def test_the_entry_points_of_common_commands():
    """What the check looks for in a command: python's script or module, a shell's script, a
    launcher's script, after cd into the checkout; nothing for inline code or paths outside."""
    assert entry_points("python3 probe.py") == [Entry("probe.py")]
    assert entry_points("bash -lc 'python -m probe.sweep --seeds $SEEDS'") == [Entry("probe.sweep", module=True)]
    assert entry_points("cd /workspace/research && bash train.sh && env > /workspace/env.txt",
                        "research") == [Entry("train.sh")]
    assert entry_points("torchrun --nproc_per_node 8 src/train.py") == [Entry("src/train.py")]
    assert entry_points("cd sub && ./run.sh") == [Entry("sub/run.sh")]
    assert entry_points("CUDA_VISIBLE_DEVICES=0 uv run python -u train.py lr=0.1") == [Entry("train.py")]
    assert entry_points("python3 -c 'import x'") == [] and entry_points("cd /opt && python x.py") == []
    assert entry_points("python $SCRIPT") == [] and entry_points("python ../escape.py") == []
    assert entry_points("bash -c 'unterminated") == []
