"""Back to the code after a run-time crash: a pod that exits non-zero with a
Python traceback goes back to a new implementation round on the same branch (exit code, log
tail and traceback in the implementer's request), the review pair and tests run again, and
the fixed commit is dispatched again; it counts against the recovery budget and says so on
the timeline. Failures that are not the code's never reach the implementer.

Real database, real tool registry and code loop state (`code_step`), the research repository
fixture; the sub-agents' work is posted as their markers, as in test_code_agents.py."""
from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid

import pytest
import sqlalchemy as sa

from models import AgentRun, Artifact, CodeCommit, Pod, RunEvent, WorkflowEvent, db
from services.agents import code_state, implementation
from services.core.actors import Actor
from services.dispatch import recovery, watcher
from services.planning import approvals
from services.workflow import experiments, lifecycle, parking, runs
from tests.fakes.anthropic_server import reply, text
from tests.integration.code_fixtures import TEST_COMMAND, call, research_repo, tool_context  # noqa: F401
from tests.integration.test_code_agents import (
    FIXED_STATS,
    Agents,
    _children,
    _commit_row,
    _first_user_text,
    _marker,
    _move,
    _notes,
    _review,
    _reviewed,
    _tool,
    _tool_results,
    local_pods,  # noqa: F401
)
from tests.integration.test_local_dispatch import plan

SYSTEM = Actor.system()
TRACEBACK = ("Traceback (most recent call last):\n"
             '  File "/workspace/repo/run.py", line 12, in <module>\n'
             "    print(mean(values))\n"
             '  File "/workspace/repo/stats.py", line 6, in mean\n'
             "    return sum(values) / len(values)\n"
             "ZeroDivisionError: division by zero")
LOG = "\n".join(["cloning experiment branch", "5% · bootstrap complete", "loading data", TRACEBACK,
                 "sagan: the command exited with code 1"])


def _crashed_dispatch(number: int, *, reason: str = "pod_exit_nonzero", exit_code: int | None = 1,
                      log: str | None = LOG, status: str = "exited", suffix: str = "a") -> Pod:
    """#number was dispatched (tested commit c…), and its pod ended as scripted."""
    experiment = experiments.get_experiment(number)
    dispatch = runs.create_run(kind="experiment", agent="provisioner", request="Dispatch.", scope_id=experiment.id,
                               status="failed")
    dispatch.failure_reason = reason
    pod = Pod(id=uuid.uuid4(), agent_run_id=dispatch.id, experiment_id=experiment.id, account="local",
              name=f"sagan-{number}-{suffix}-0-1", status=status, exit_code=exit_code)
    db.session.add(pod)
    db.session.flush()
    if log is not None:
        content = log.encode()
        db.session.add(Artifact(pod_id=pod.id, experiment_id=experiment.id, name=f"sagan-logs/{pod.name}.log",
                                content_type="text/plain", size=len(content),
                                sha256=hashlib.sha256(content).hexdigest(), content=content))
    db.session.commit()
    return pod


@pytest.fixture
def dispatched(app, research_repo, make_experiment):  # noqa: F811
    """#n passed review and tests in round 1 (commit c…), and was dispatched: now running."""
    number = make_experiment("Crashes on a pod", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.pod_spec = {"name": "a", "env": {}}
        db.session.commit()
        _marker(experiment, "epm:experiment-implementation", "experiment-implementer", metadata={"round": 1})
        _commit_row(experiment, "c" * 40, 1)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "pass")
        _reviewed(experiment, "code-plan-reviewer", 1, "pass")
        _move(experiment, "testing", 1)
        _marker(experiment, "epm:test-verdict", "code-tests",
                metadata={"verdict": "pass", "commit": "c" * 40, "branch": f"experiment-{number}", "pushed": True,
                          "round": 1})
        implementation.splice(experiment, f"experiment-{number}", "c" * 40)
        lifecycle.transition(experiment, "queued", SYSTEM, note="Dispatch committed.")
        lifecycle.transition(experiment, "running", SYSTEM, note="Pods running.")
        db.session.commit()
        db.session.remove()
    return number


def test_a_crash_goes_back_to_the_implementer_and_the_fixed_commit_is_dispatched(app, dispatched):
    number = dispatched
    with app.app_context():
        pod = _crashed_dispatch(number)
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "send_crash_to_code", pod=pod.name, note="mean() of an empty list")
        assert not result.is_error, result.content
        experiment = experiments.get_experiment(number)
        assert experiment.status == "implementing" and code_state.current_round(experiment) == 2
        [implementer] = _children(ctx.run.id)
        assert implementer.agent == "experiment-implementer" and result.park == {"children": [str(implementer.id)]}
        # The implementer is told the exit code, the traceback and the log's end, on the same branch.
        assert "Code round 2" in implementer.request and f"branch experiment-{number}" in implementer.request
        assert "exited with code 1" in implementer.request and "ZeroDivisionError: division by zero" in implementer.request
        assert "cccccccccccc" in implementer.request and "mean() of an empty list" in implementer.request
        # It is a recovery: it resumes the crashed dispatch, counts in the budget, and says so.
        assert implementer.resumes_run_id == pod.agent_run_id
        assert [r.id for r in recovery.recent_recoveries(experiment.id)] == [implementer.id]
        note = [n for n in _notes(experiment.id) if "crashed (exit 1)" in n][-1]
        assert "back to the implementer for code round 2" in note and "recovery 1 of 3 in 24 h" in note

        # Round 2: the fix lands, the review pair runs again, then the tests, then a new dispatch.
        _marker(experiment, "epm:experiment-implementation", "experiment-implementer", metadata={"round": 2})
        _commit_row(experiment, "d" * 40, 2)
        implementer.status = "completed"
        db.session.commit()
        step = call(tool_context(number, agent="experiment-orchestrator"), "code_step")
        assert experiments.get_experiment(number).status == "code_reviewing", step.content
        reviewers = {r.agent: r for r in db.session.scalars(sa.select(AgentRun).where(
            AgentRun.agent.in_(implementation.REVIEWERS)))}
        assert set(reviewers) == set(implementation.REVIEWERS)
        assert "ZeroDivisionError" in reviewers["code-reviewer"].request  # what round 1's crash asked for
        for run in reviewers.values():
            run.status = "completed"
        _reviewed(experiment, "code-reviewer", 2, "pass")
        _reviewed(experiment, "code-plan-reviewer", 2, "pass")
        call(tool_context(number, agent="experiment-orchestrator"), "code_step")
        assert experiments.get_experiment(number).status == "testing"
        _marker(experiment, "epm:test-verdict", "code-tests",
                metadata={"verdict": "pass", "commit": "d" * 40, "branch": f"experiment-{number}", "pushed": True,
                          "round": 2})
        last = tool_context(number, agent="experiment-orchestrator")
        redispatch = call(last, "code_step")
        assert "Code review pair passed round 2; pod_spec branch/sha spliced; dispatching pod-provisioner" \
            in redispatch.content
        [provisioner] = _children(last.run.id)
        assert provisioner.agent == "pod-provisioner" and "d" * 40 in provisioner.request
        experiment = experiments.get_experiment(number)
        assert experiment.git_commit == "d" * 40 and experiment.pod_spec["env"]["SAGAN_GIT_COMMIT"] == "d" * 40


@pytest.mark.parametrize("scripted, words", [
    ({"reason": "setup_failed"}, "setup_failed, which is not the research code's failure"),
    ({"reason": "provider_capacity"}, "provider_capacity, which is not"),
    ({"reason": "pod_exit_nonzero", "status": "vanished"}, "which is not the research code's failure"),
    ({"exit_code": 0}, "did not crash"),
    ({"exit_code": None}, "did not crash"),
    ({"log": "out of disk space\nexit 1"}, "shows no Python traceback"),
    ({"log": None}, "shows no Python traceback"),
])
def test_failures_that_are_not_the_codes_never_reach_the_implementer(app, dispatched, scripted, words):
    """A clear tool error for each, the experiment still running and no implementer started."""
    with app.app_context():
        pod = _crashed_dispatch(dispatched, **scripted)
        ctx = tool_context(dispatched, agent="experiment-orchestrator")
        result = call(ctx, "send_crash_to_code", pod=pod.name)
        assert result.is_error and words in result.content, result.content
        assert experiments.get_experiment(dispatched).status == "running"
        assert _children(ctx.run.id) == []


def test_a_spent_recovery_budget_refuses_and_changes_nothing(app, dispatched):
    with app.app_context():
        experiment = experiments.get_experiment(dispatched)
        for _ in range(app.config["RECOVERY_MAX_PER_DAY"]):
            earlier = runs.create_run(kind="apply", agent="experiment-orchestrator", request="r",
                                      scope_id=experiment.id, status="failed")
            runs.create_run(kind="apply", agent="experiment-orchestrator", request="r", scope_id=experiment.id,
                            status="failed", resumes_run_id=earlier.id)
        db.session.commit()
        pod = _crashed_dispatch(dispatched)
        ctx = tool_context(dispatched, agent="experiment-orchestrator")
        result = call(ctx, "send_crash_to_code", pod=pod.name)
        assert result.is_error and "the recovery budget is spent (3 of 3 in 24 h)" in result.content
        assert experiments.get_experiment(dispatched).status == "running" and _children(ctx.run.id) == []


def test_bad_input_and_the_guarded_move(app, dispatched, make_experiment):
    """Another experiment's pod, an agent outside the orchestrator, and a plain set_status back to
    implementing without a crash: each refused, nothing changed."""
    other = make_experiment("Someone else's")
    with app.app_context():
        foreign = _crashed_dispatch(other, suffix="z")
        ctx = tool_context(dispatched, agent="experiment-orchestrator")
        assert "No pod" in call(ctx, "send_crash_to_code", pod=foreign.name).content
        analyzer = tool_context(dispatched, agent="analyzer")
        assert "not allowed for analyzer" in call(analyzer, "send_crash_to_code", pod=foreign.name).content
        moved = call(ctx, "set_status", status="implementing", note="try again")
        assert moved.is_error and "send_crash_to_code" in moved.content
        assert experiments.get_experiment(dispatched).status == "running"
        assert db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)).where(
            WorkflowEvent.to_status == "implementing", WorkflowEvent.from_status == "running")) == 0


def test_an_infra_task_that_passes_its_tests_drafts_instead_of_dispatching(app, research_repo, make_experiment):  # noqa: F811
    """The pod-free path through the code loop: an infra task's passing tests
    move it to clean_result_drafting, with no pod-provisioner started."""
    number = make_experiment("Nightly eval harness", kind="infra", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "pass")
        _reviewed(experiment, "code-plan-reviewer", 1, "pass")
        _move(experiment, "testing", 1)
        _marker(experiment, "epm:test-verdict", "code-tests",
                metadata={"verdict": "pass", "commit": "e" * 40, "branch": f"experiment-{number}", "pushed": True,
                          "round": 1})
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert "nothing is dispatched" in result.content and not result.park
        experiment = experiments.get_experiment(number)
        assert experiment.status == "clean_result_drafting" and experiment.git_commit == "e" * 40
        assert _children(ctx.run.id) == []
        assert "launch_pods" not in result.content
        refused = call(ctx, "launch_pods")
        assert refused.is_error and refused.content.startswith("pod_free:")


# --- the whole way round: a real pod crashes, the implementer fixes it, a real pod runs the fix ---

# Round 1's run.py reads the values the plan passes in $VALUES, and trips over the plan's
# trailing comma on the pod: float("") raises, with a traceback in the research code.
CRASHING_RUN = '''"""The experiment a pod runs: the mean of $VALUES, written where Sagan collects artifacts."""
import json
import os

from stats import mean

values = [float(v) for v in os.environ.get("VALUES", "1,2,3").split(",")]
out = os.environ.get("SAGAN_ARTIFACT_DIR", "artifacts")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "metrics.json"), "w") as handle:
    json.dump({"mean": mean(values), "n": len(values)}, handle)
print("wrote metrics.json")
'''
# Round 2, after the crash: empty items (a trailing comma) are skipped.
FIXED_RUN = CRASHING_RUN.replace('.split(",")]', '.split(",") if v.strip()]')


def _last_tool_result(body) -> str:
    content = body["messages"][-1]["content"][0]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def _last_call(body) -> dict:
    """The input of the agent's latest tool call (after its thinking block)."""
    return next(b["input"] for b in body["messages"][-2]["content"] if b["type"] == "tool_use")


def _crashed_pod_name(body) -> str:
    """The pod list_pods reported with a non-zero exit code (what a model would pick out)."""
    return next(p["name"] for p in json.loads(_last_tool_result(body)) if p["exitCode"] not in (None, 0))


@pytest.mark.slow
def test_a_real_crash_goes_round_the_code_loop_and_the_fixed_commit_runs_on_a_real_pod(
        app, fake_anthropic, worker, local_pods, research_repo, make_experiment):  # noqa: F811
    """Back to the code end to end: round 1 passes review and tests → a local pod runs it and
    crashes with a traceback → the orchestrator reads the pod's log and sends the crash to
    the implementer (a recovery, on the timeline) → round 2 fixes it, is reviewed and tested →
    a second local pod runs exactly the fixed commit, exits 0, and the experiment moves on."""
    script = "git rev-parse HEAD > \"$SAGAN_ARTIFACT_DIR/commit.txt\" && python3 run.py"
    spec = {"name": "mean", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 1,
            "keepAliveMinutes": 0, "env": {"VALUES": "1,2,3,"},
            "dockerArgs": "bash -c \"$(echo " + base64.b64encode(script.encode()).decode() + " | base64 -d)\"",
            "config": {"command": "the mean of VALUES", "artifacts": ["/workspace/sagan-artifacts/commit.txt",
                                                                      "/workspace/sagan-artifacts/metrics.json"]}}
    crash_note = "run.py turns every comma-separated item into a float; the trailing comma gives float('')."
    agents = Agents(app)
    fake_anthropic.default = agents
    agents.script(
        "experiment-orchestrator",
        *[_tool("code_step")] * 4,                     # implement, review, test, dispatch round 1
        _tool("list_pods"),                            # woken: the pod-provisioner ended after the crash
        lambda body: _tool("read_pod_logs", pod=_crashed_pod_name(body), tail=100),
        lambda body: _tool("send_crash_to_code", pod=_last_call(body)["pod"], note=crash_note),
        *[_tool("code_step")] * 3,                     # review, test, dispatch round 2
        _tool("post_marker", marker="epm:interpretation", note="The fixed run's mean is 2.0.",
              next_status="reviewing"),
        reply(text("The fixed commit ran; the owner reviews.")))
    agents.script(
        "experiment-implementer",
        _tool("write_file", path="stats.py", content=FIXED_STATS),
        _tool("write_file", path="run.py", content=CRASHING_RUN),
        _tool("run_command", command=TEST_COMMAND),
        _tool("git_commit", message="mean() divides by the count; run.py reads $VALUES"),
        _tool("git_push"),
        _tool("post_marker", marker="epm:experiment-implementation", note="Round 1.", metadata={"round": 1}),
        reply(text("Round 1 done.")),
        # round 2: the crash round
        _tool("read_file", path="run.py"),
        _tool("write_file", path="run.py", content=FIXED_RUN),
        _tool("run_command", command=TEST_COMMAND),
        _tool("git_commit", message="run.py skips empty items in $VALUES (a trailing comma crashed the pod)"),
        _tool("post_marker", marker="epm:experiment-implementation", note="Empty items skipped.",
              metadata={"round": 2}),
        reply(text("Round 2 done.")))
    for reviewer, marker in implementation.REVIEWERS.items():
        agents.script(reviewer, _review(marker, reviewer, 1, "pass"), reply(text("Pass.")),
                      _review(marker, reviewer, 2, "pass"), reply(text("Pass.")))
    agents.script("pod-provisioner",
                  _tool("launch_pods"), _tool("post_marker", marker="epm:pod-dispatched", note="One local pod."),
                  _tool("wait_for_pods"),  # woken by the failed dispatch: the run fails with its reason
                  _tool("launch_pods"), _tool("post_marker", marker="epm:pod-dispatched", note="The fixed commit."),
                  _tool("wait_for_pods"), reply(text("The pod exited 0.")))

    number = make_experiment("Mean of the values", status="planning", pod_account="local")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, plan(spec), Actor("owner"), source="owner")
        effects = approvals.approve(submission.approval, Actor("owner"), confirm_unchecked=True)
        db.session.commit()
        lifecycle.run_side_effects(effects)
        experiment_id = experiment.id

    with app.app_context():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            worker()
            db.session.expire_all()
            orchestrator = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-orchestrator"))
            if orchestrator.status in ("completed", "failed"):
                break
            watcher.watch()
            parking.wake_ready_runs()
            db.session.commit()
            time.sleep(0.3)
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        notes = _notes(experiment_id)
        assert (orchestrator.status, orchestrator.failure_reason) == ("completed", None), \
            "\n".join(notes[-25:] + _tool_results("experiment-orchestrator")[-6:])
        assert experiment.status == "reviewing", notes[-10:]

        # Two dispatches: the first crashed in the research code, the second finished.
        dispatches = list(db.session.scalars(sa.select(AgentRun).where(AgentRun.kind == "experiment")
                                             .order_by(AgentRun.created_at)))
        assert [(d.status, d.failure_reason) for d in dispatches] == [("failed", "pod_exit_nonzero"),
                                                                       ("completed", None)]
        pods = list(db.session.scalars(sa.select(Pod).order_by(Pod.created_at)))
        assert [p.exit_code for p in pods] == [1, 0]

        # The orchestrator read the crashed pod's log, and it showed the traceback.
        logs = [b for b in db.session.scalars(sa.select(RunEvent.body).where(
            RunEvent.run_id == orchestrator.id, RunEvent.event_type == "tool_result"))
                if b and b.startswith(f"Log of pod {pods[0].name}")]
        assert logs and "Traceback (most recent call last):" in logs[0]
        assert "ValueError: could not convert string to float: ''" in logs[0]

        # Round 2 was asked for with the crash: exit code, traceback, the orchestrator's reading.
        implementers = list(db.session.scalars(sa.select(AgentRun).where(
            AgentRun.agent == "experiment-implementer").order_by(AgentRun.created_at)))
        assert len(implementers) == 2
        crash_round = implementers[1]
        assert "Code round 2" in crash_round.request and "exited with code 1" in crash_round.request
        assert "could not convert string to float" in crash_round.request and crash_note in crash_round.request
        round_two = [_first_user_text(b) for b in agents.requests["experiment-implementer"] if len(b["messages"]) == 1]
        assert "could not convert string to float" in round_two[1]

        # It is a recovery: it resumes the crashed dispatch, counts in the budget, and the timeline says so.
        assert crash_round.resumes_run_id == dispatches[0].id
        assert [r.id for r in recovery.recent_recoveries(experiment_id)] == [crash_round.id]
        sent = [n for n in notes if f"{pods[0].name} crashed (exit 1)" in n]
        assert len(sent) == 1 and "back to the implementer for code round 2" in sent[0]
        assert "recovery 1 of 3 in 24 h" in sent[0]

        # The fixed commit was reviewed (round 2), tested, pushed, spliced, and is what the second pod ran.
        commits = list(db.session.scalars(sa.select(CodeCommit).order_by(CodeCommit.created_at)))
        assert [c.round for c in commits] == [1, 2]
        fixed = commits[-1].sha
        assert research_repo.origin_sha(f"experiment-{number}") == fixed
        assert experiment.git_commit == fixed and experiment.pod_spec["env"]["SAGAN_GIT_COMMIT"] == fixed
        verdicts = [e.metadata_ for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.marker == "epm:test-verdict").order_by(WorkflowEvent.created_at))]
        assert [(v["verdict"], v["commit"], v["round"]) for v in verdicts] == [
            ("pass", commits[0].sha, 1), ("pass", fixed, 2)]
        reviews = [e.metadata_["review"]["round"] for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.marker.in_(tuple(implementation.REVIEWERS.values()))))]
        assert sorted(reviews) == [1, 1, 2, 2]
        artifacts = {a.name: a.content.decode() for a in db.session.scalars(
            sa.select(Artifact).where(Artifact.pod_id == pods[1].id, Artifact.name.in_(("commit.txt",
                                                                                         "metrics.json"))))}
        assert artifacts["commit.txt"].strip() == fixed
        assert json.loads(artifacts["metrics.json"]) == {"mean": 2.0, "n": 3}
        assert "Uploads verified." in notes
