"""The whole journey (issue: end to end): one experiment from an idea on the board to a
shared clean result that a mentor reads — PostgreSQL, Redis, a real RQ worker process with
the scheduler, the scripted agents of `make demo` speaking the Anthropic wire format, two
real local pods, the owner in a browser (approving on a 390 px phone)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from config import TestConfig
from models import AgentRun, Experiment, Pod, RunEvent, WorkflowEvent, db
from tests.e2e.actions import PHONE, move_card, open_board

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from demo_agents import MODEL, DemoAgents  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HAPPY_STATUSES = ["proposed", "clarifying", "awaiting_clarifications", "clarifying", "plan_pending", "approved",
                  "implementing", "queued", "running", "uploading", "verifying", "interpreting",
                  "clean_result_drafting", "awaiting_promotion", "shared"]


@pytest.fixture
def journey_stack(app, live_server, monkeypatch, tmp_path):
    """Scripted agents, and a real worker process (with the scheduler) on the test database."""
    agents = DemoAgents().start()
    pods_dir = tempfile.mkdtemp(prefix="sagan-journey-pods-", dir="/tmp")
    os.chmod(pods_dir, 0o711)
    settings = {"ANTHROPIC_API_KEY": "demo-scripted-agents", "ANTHROPIC_BASE_URL": agents.url,
                "SAGAN_AGENT_MODEL": MODEL, "SAGAN_BASE_URL": live_server.url, "SAGAN_LOCAL_PODS_DIR": pods_dir}
    for key, value in settings.items():
        monkeypatch.setitem(app.config, key, value)
    env = {**os.environ, **settings, "DATABASE_URL": TestConfig.SQLALCHEMY_DATABASE_URI,
           "REDIS_URL": TestConfig.REDIS_URL, "SECRET_KEY": "journey", "SAGAN_LOCAL_PODS": "1",
           "SAGAN_SCHEDULER_TICK_SECONDS": "1", "SAGAN_INSTANCE_DIR": str(tmp_path)}
    worker = subprocess.Popen([sys.executable, "-m", "workers.launcher"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    yield
    os.killpg(worker.pid, 15)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, 9)
    agents.stop()


def _status(app, number) -> str:
    with app.app_context():
        db.session.remove()
        return db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number))


def _wait_for(app, number, wanted: set[str], seconds: int = 90) -> str:
    deadline = time.monotonic() + seconds
    status = _status(app, number)
    while status not in wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        status = _status(app, number)
    assert status in wanted, f"#{number} is {status}, expected {wanted}"
    return status


def test_idea_to_shared_result(app, browser_session, owner_account, journey_stack):
    """Board → clarifying → questions answered → plan approved on a phone → pods → analysis →
    clean result → promoted → a mentor reads it through a share link."""
    desk = browser_session()
    page = open_board(desk)
    page.get_by_role("link", name="New experiment").click()
    page.get_by_label("Title").fill("Do two seeds of the probe agree?")
    page.get_by_role("button", name="Create").click()
    number = int(re.search(r"/experiments/(\d+)", page.url).group(1))
    page.goto("/")
    move_card(page, number, "clarifying")
    _wait_for(app, number, {"awaiting_clarifications"})

    page.goto(f"/experiments/{number}")
    page.get_by_label("How many seeds should the demo run?").fill("Two.")
    page.get_by_label("Which metric matters most?").fill("Accuracy.")
    page.get_by_role("button", name="Send answers to the planner").click()
    _wait_for(app, number, {"plan_pending"})

    phone = browser_session(PHONE)
    mobile = phone.login()
    mobile.goto("/approvals")
    mobile.locator(".queue-item a").first.click()
    assert mobile.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    mobile.get_by_label("Anything else").fill("Keep it small.")
    mobile.get_by_role("button", name="Approve", exact=True).click()
    mobile.get_by_role("button", name="Approve anyway").click()
    mobile.get_by_text("This request is").wait_for()

    _wait_for(app, number, {"awaiting_promotion"}, seconds=150)
    page.goto(f"/experiments/{number}")
    page.get_by_role("button", name=re.compile("Promote", re.I)).first.click()
    _wait_for(app, number, {"shared", "completed"})

    with app.app_context():
        from services import shares
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        assert experiment.status == "shared", experiment.status
        _, token = shares.create_link(scope="experiment", experiment=experiment, label="mentor")
        db.session.commit()
        moves = [e.to_status for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at))]
        assert moves == HAPPY_STATUSES[1:], moves
        markers = [e.marker for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "marker")
            .order_by(WorkflowEvent.created_at))]
        for marker in ("epm:clarify", "epm:clarify-answers", "epm:textbox-answers", "epm:upload-verification",
                       "epm:interpretation", "epm:clean-result-critique", "epm:awaiting-promotion", "epm:promoted"):
            assert marker in markers, (marker, markers)
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment.id)))
        assert len(pods) == 2 and all(p.exit_code == 0 for p in pods)
        assert sum(float(p.cost_per_hr or 0) for p in pods) == 0.0  # local pods cost nothing
        run_kinds = {r.kind for r in db.session.scalars(sa.select(AgentRun).where(AgentRun.scope_id == experiment.id))}
        assert run_kinds == {"plan", "apply", "experiment"}
        assert db.session.scalar(sa.select(sa.func.count(RunEvent.id))) > 20

    mentor = browser_session(PHONE).page
    mentor.goto(f"/s/{token}")
    assert "Two seeds of the probe agree" in mentor.content()
    mentor.wait_for_load_state()
    assert mentor.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), mentor.url


def test_rejected_plan_is_revised_then_approved(app, client, owner_account, journey_stack):
    """The owner rejects the plan with a note; the planner revises it; the new version is approved."""
    owner_account.login()
    csrf = owner_account.csrf()
    with app.app_context():
        from services import experiments
        from services.actors import Actor
        experiment = experiments.create_experiment({"title": "Reject me first", "runpod_account": "local"},
                                                   Actor("owner"))
        db.session.commit()
        number = experiment.number
    client.post(f"/board/move/{number}", data={"to": "planning", "expected": "proposed", "csrf_token": csrf})
    _wait_for(app, number, {"awaiting_clarifications", "plan_pending"})
    if _status(app, number) == "awaiting_clarifications":
        client.post(f"/experiments/{number}/answers", data={"answer-seeds": "Two.", "answer-metric": "Accuracy.",
                                                            "csrf_token": csrf})
        _wait_for(app, number, {"plan_pending"})
    with app.app_context():
        from models import ApprovalRequest
        first = db.session.scalar(sa.select(ApprovalRequest).where(ApprovalRequest.status == "pending"))
    client.post(f"/approvals/{first.id}/resolve", data={"decision": "reject", "note": "Use three seeds.",
                                                        "csrf_token": csrf})
    _wait_for(app, number, {"plan_pending"})
    with app.app_context():
        from models import ApprovalRequest, PlanVersion
        second = db.session.scalar(sa.select(ApprovalRequest).where(ApprovalRequest.status == "pending"))
        assert second.id != first.id
        assert db.session.scalar(sa.select(sa.func.count(PlanVersion.id))) == 2
        rejected = db.session.get(ApprovalRequest, first.id)
        assert rejected.status == "rejected"
        runs = list(db.session.scalars(sa.select(AgentRun).where(AgentRun.kind == "plan").order_by(AgentRun.created_at)))
        assert "Use three seeds." in runs[-1].request
    client.post(f"/approvals/{second.id}/resolve", data={"decision": "approve", "confirm_unchecked": "1",
                                                         "csrf_token": csrf})
    _wait_for(app, number, {"implementing", "queued", "running", "uploading", "verifying", "interpreting",
                            "clean_result_drafting", "awaiting_promotion"})


# --- the journey with code-writing agents -------------------------------------------------------

from tests.integration.code_fixtures import research_repo  # noqa: E402,F401
from tests.integration.test_code_agents import (  # noqa: E402
    EMPTY_CHECK, FIXED_STATS, REQUIRED_FIX, TEST_COMMAND, Agents, _review, _tool)


def _code_journey_plan() -> str:
    import base64
    import json
    script = "git rev-parse HEAD > \"$SAGAN_ARTIFACT_DIR/commit.txt\" && python3 run.py"
    docker_args = "bash -c \"$(echo " + base64.b64encode(script.encode()).decode() + " | base64 -d)\""
    spec = [{"name": f"mean-{i}", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 1,
             "keepAliveMinutes": 0, "dockerArgs": docker_args,
             "config": {"command": "compute the mean", "artifacts": ["/workspace/sagan-artifacts/commit.txt",
                                                                     "/workspace/sagan-artifacts/metrics.json"]}}
            for i in range(2)]
    sections = "\n\n".join(f"## {t}\n{t}." for t in (
        "Goal", "Hypothesis", "Prediction", "Kill Criterion", "Experimental Setup", "Compute and Hardware",
        "Artifacts", "Verification", "Risks and Red Team", "Likely Clean Result"))
    return (f"{sections}\n\n## Approval Checklist\n- [x] Fix mean() first\n- [ ] Two pods are enough\n\n"
            f"[TEXTBOX:anything-else]\n\n```runpod-spec\n{json.dumps(spec)}\n```\n")


@pytest.mark.slow
def test_idea_to_shared_result_with_code_agents(app, browser_session, owner_account, fake_anthropic, research_repo,  # noqa: F811
                                                live_server, monkeypatch, tmp_path):
    """The whole journey of the issue: questions answered in the browser, a plan with a checklist, a
    textbox and a two-pod spec approved on a phone, the implementer commits, review round 1 asks for a
    fix, round 2 passes, the tests pass, two local pods run exactly that commit, the analyzer writes
    the result, the critic passes, the owner promotes, and a mentor reads it through a share link."""
    from demo_agents import CLEAN_RESULT
    from tests.fakes.anthropic_server import reply as fake_reply, text as fake_text
    agents = Agents(app)
    fake_anthropic.default = agents
    agents.script("experiment-planner",
                  _tool("ask_questions", questions=[{"key": "which-bug", "text": "Which bug should be fixed?"}]),
                  _tool("submit_plan", markdown=_code_journey_plan()), fake_reply(fake_text("Plan submitted.")))
    agents.script("experiment-orchestrator", *[_tool("code_step")] * 6,
                  _tool("spawn_agent", agent="analyzer", request="Interpret the results and write the clean result."),
                  _tool("spawn_agent", agent="clean-result-critic", request="Review the clean result, round 1."),
                  _tool("post_marker", marker="epm:awaiting-promotion", note="Ready for the owner.",
                        next_status="awaiting_promotion"),
                  fake_reply(fake_text("Awaiting promotion.")))
    agents.script(
        "experiment-implementer",
        _tool("write_file", path="stats.py", content=FIXED_STATS),
        _tool("run_command", command=TEST_COMMAND),
        _tool("git_commit", message="Divide the mean by the count"),
        _tool("post_marker", marker="epm:experiment-implementation", note="Fixed mean().", metadata={"round": 1}),
        fake_reply(fake_text("Round 1 done.")),
        _tool("apply_patch", patch=EMPTY_CHECK),
        _tool("run_command", command=TEST_COMMAND),
        _tool("git_commit", message="mean() of nothing raises ValueError"),
        _tool("post_marker", marker="epm:experiment-implementation", note="Empty input raises.", metadata={"round": 2}),
        fake_reply(fake_text("Round 2 done.")))
    agents.script("code-reviewer",
                  _review("epm:code-review", "code-reviewer", 1, "needs_targeted_fix", REQUIRED_FIX),
                  fake_reply(fake_text("Needs one fix.")),
                  _review("epm:code-review", "code-reviewer", 2, "pass"), fake_reply(fake_text("Passes.")))
    agents.script("code-plan-reviewer",
                  _review("epm:code-review-codex", "code-plan-reviewer", 1, "pass"), fake_reply(fake_text("Faithful.")),
                  _review("epm:code-review-codex", "code-plan-reviewer", 2, "pass"), fake_reply(fake_text("Faithful.")))
    agents.script("pod-provisioner", _tool("launch_pods"),
                  _tool("post_marker", marker="epm:pod-dispatched", note="Two local pods."),
                  _tool("wait_for_pods"), fake_reply(fake_text("Both pods exited 0.")))
    agents.script("analyzer",
                  _tool("post_marker", marker="epm:interpretation", note="mean() is fixed; both pods agree."),
                  _tool("write_clean_result", title="The fixed mean() gives the same answer on two pods (LOW confidence)",
                        html=CLEAN_RESULT),
                  _tool("set_status", status="clean_result_drafting", note="Draft written."),
                  fake_reply(fake_text("Draft written.")))
    agents.script("clean-result-critic",
                  _tool("post_marker", marker="epm:clean-result-critique", review_pair="clean_result", round=1,
                        reviewer="clean-result-critic", verdict="pass"), fake_reply(fake_text("Pass.")))

    pods_dir = tempfile.mkdtemp(prefix="sagan-journey-pods-", dir="/tmp")
    os.chmod(pods_dir, 0o711)
    settings = {"SAGAN_BASE_URL": live_server.url, "SAGAN_LOCAL_PODS_DIR": pods_dir}
    for key, value in settings.items():
        monkeypatch.setitem(app.config, key, value)
    env = {**os.environ, **settings, "DATABASE_URL": TestConfig.SQLALCHEMY_DATABASE_URI,
           "REDIS_URL": TestConfig.REDIS_URL, "SECRET_KEY": "journey", "SAGAN_LOCAL_PODS": "1",
           "SAGAN_SCHEDULER_TICK_SECONDS": "1", "SAGAN_INSTANCE_DIR": str(tmp_path),
           "ANTHROPIC_API_KEY": app.config["ANTHROPIC_API_KEY"], "ANTHROPIC_BASE_URL": fake_anthropic.url,
           "SAGAN_MODEL_MAX_RETRIES": "0", "SAGAN_ALLOW_LOCAL_REPO": "1",
           "SAGAN_WORKSPACES_DIR": app.config["SAGAN_WORKSPACES_DIR"]}
    worker = subprocess.Popen([sys.executable, "-m", "workers.launcher"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        desk = browser_session()
        page = open_board(desk)
        page.get_by_role("link", name="New experiment").click()
        page.get_by_label("Title").fill("Fix mean() and check it on two pods")
        page.get_by_role("button", name="Create").click()
        number = int(re.search(r"/experiments/(\d+)", page.url).group(1))
        with app.app_context():
            from services import experiments as experiment_service
            experiment = experiment_service.get_experiment(number)
            experiment.runpod_account = "local"
            db.session.commit()
        page.goto("/")
        move_card(page, number, "clarifying")
        _wait_for(app, number, {"awaiting_clarifications"})
        page.goto(f"/experiments/{number}")
        page.get_by_label("Which bug should be fixed?").fill("The mean divides by n + 1.")
        page.get_by_role("button", name="Send answers to the planner").click()
        _wait_for(app, number, {"plan_pending"})

        mobile = browser_session(PHONE).login()
        mobile.goto("/approvals")
        mobile.locator(".queue-item a").first.click()
        assert mobile.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        mobile.get_by_label("Anything else").fill("Push the fix before the pods run.")
        mobile.get_by_role("button", name="Approve", exact=True).click()
        mobile.get_by_role("button", name="Approve anyway").click()
        mobile.get_by_text("This request is").wait_for()

        try:
            _wait_for(app, number, {"awaiting_promotion", "blocked"}, seconds=240)
        except AssertionError:
            with app.app_context():
                db.session.remove()
                for r in db.session.scalars(sa.select(AgentRun).order_by(AgentRun.created_at)):
                    print("RUN", r.agent, r.kind, r.status, r.failure_reason, (r.last_error or "")[:300], r.waiting_for)
                for p in db.session.scalars(sa.select(Pod)):
                    print("POD", p.name, p.status, p.exit_code, p.progress_message, p.last_error)
            raise
        assert _status(app, number) == "awaiting_promotion"
        page.goto(f"/experiments/{number}")
        page.get_by_role("button", name=re.compile("Promote", re.I)).first.click()
        _wait_for(app, number, {"shared", "completed"})
    finally:
        os.killpg(worker.pid, 15)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, 9)

    with app.app_context():
        from models import CodeCommit
        from services import shares
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        moves = [e.to_status for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at))]
        expected = ["clarifying", "awaiting_clarifications", "clarifying", "plan_pending", "approved", "implementing",
                    "code_reviewing", "implementing", "code_reviewing", "testing", "queued", "running", "uploading",
                    "verifying", "interpreting", "clean_result_drafting", "awaiting_promotion", "shared"]
        assert moves == expected, moves
        reviews = [e.marker for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker.like("epm:code-review%")))]
        assert sorted(reviews) == ["epm:code-review", "epm:code-review", "epm:code-review-codex",
                                   "epm:code-review-codex"]
        head = db.session.scalar(sa.select(CodeCommit.sha).where(CodeCommit.experiment_id == experiment.id)
                                 .order_by(CodeCommit.created_at.desc()).limit(1))
        from models import Artifact
        commits = [a.content.decode().strip() for a in db.session.scalars(sa.select(Artifact).where(
            Artifact.experiment_id == experiment.id, Artifact.name == "commit.txt"))]
        assert commits == [head, head], (commits, head)
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment.id)))
        assert len(pods) == 2 and sum(float(p.cost_per_hr or 0) for p in pods) == 0.0
        _, token = shares.create_link(scope="experiment", experiment=experiment, label="mentor")
        db.session.commit()
    mentor = browser_session(PHONE).page
    mentor.goto(f"/s/{token}")
    mentor.wait_for_load_state()
    assert "fixed mean()" in mentor.content()
