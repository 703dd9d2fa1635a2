"""Back to the code after a run-time crash (issue 15 item 7): a pod that exits non-zero with a
Python traceback goes back to a new implementation round on the same branch (exit code, log
tail and traceback in the implementer's request), the review pair and tests run again, and
the fixed commit is dispatched again; it counts against the recovery budget and says so on
the timeline. Failures that are not the code's never reach the implementer.

Real database, real tool registry and code loop state (`code_step`), the research repository
fixture; the sub-agents' work is posted as their markers, as in test_code_agents.py."""
from __future__ import annotations

import hashlib
import uuid

import pytest
import sqlalchemy as sa

from models import AgentRun, Artifact, Pod, WorkflowEvent, db
from services import experiments, lifecycle, recovery, runs
from services.actors import Actor
from services.agents import code_state, implementation
from tests.integration.code_fixtures import call, research_repo, tool_context  # noqa: F401
from tests.integration.test_code_agents import _children, _commit_row, _marker, _move, _notes, _reviewed

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
    """The pod-free path through the code loop (issue 15 item 8): an infra task's passing tests
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
