"""The code loop end to end: implementer → review pair (⇄ implementer) → tests → dispatch.

A real research repository (a tiny Python project whose test fails), real git worktrees,
real bubblewrap, a real RQ worker in burst mode, the app's real `anthropic` client talking
to the loopback fake (scripted per agent), and a real `local` pod that checks out the
commit the loop produced.
"""
from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
from collections import defaultdict, deque

import pytest
import sqlalchemy as sa

from models import AgentRun, Artifact, CodeCommit, RunEvent, WorkflowEvent, db
from services.agents import code_state, implementation
from services.claude import loader
from services.core import settings
from services.core.actors import Actor
from services.dispatch import watcher
from services.planning import approvals
from services.workflow import experiments, jobs, lifecycle, markers
from tests.fakes.anthropic_server import error, reply, system_text, text, tool_use
from tests.integration.code_fixtures import TEST_COMMAND, call, git, research_repo, tool_context  # noqa: F401
from tests.integration.test_local_dispatch import plan

# Without bubblewrap the code tools refuse to run anything; `make test` installs it. Under CI
# nothing may be missing, so there these tests run (and fail, saying what to install).
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI", "") not in ("1", "true"),
                                reason="bubblewrap is not installed (make test installs it on Debian)")

FIXED_STATS = '''"""Small statistics helpers the experiment uses."""


def mean(values):
    """The arithmetic mean of a sequence of numbers."""
    return sum(values) / len(values)
'''

# The reviewer's fix as a model would send it: one patch, two files (blank context lines are " ").
EMPTY_CHECK = "\n".join([
    "--- a/stats.py", "+++ b/stats.py", "@@ -3,4 +3,6 @@", " ",
    " def mean(values):",
    '     """The arithmetic mean of a sequence of numbers."""',
    "+    if not values:",
    '+        raise ValueError("mean of an empty sequence")',
    "     return sum(values) / len(values)",
    "--- a/test_stats.py", "+++ b/test_stats.py", "@@ -10,6 +10,10 @@ class MeanTest(unittest.TestCase):",
    "     def test_mean_of_one_number(self):",
    "         self.assertEqual(mean([5]), 5)",
    " ",
    "+    def test_mean_of_nothing_is_an_error(self):",
    "+        with self.assertRaises(ValueError):",
    "+            mean([])",
    "+",
    " ",
    ' if __name__ == "__main__":',
    "     unittest.main()",
]) + "\n"

REQUIRED_FIX = "mean([]) raises ZeroDivisionError; raise ValueError('mean of an empty sequence') and test it."


class Agents:
    """Scripts "Claude" per agent: each request is answered from the script of the agent whose
    system prompt it carries, so the order in which the worker runs the agents does not matter."""

    def __init__(self, app):
        with app.app_context():
            self.by_prompt = {loader.get(name).prompt: name for name in loader.names()}
        self.scripts: dict[str, deque] = defaultdict(deque)
        self.requests: dict[str, list] = defaultdict(list)

    def script(self, agent: str, *turns) -> None:
        self.scripts[agent].extend(turns)

    def __call__(self, body):
        agent = self.by_prompt.get(system_text(body), "?")
        self.requests[agent].append(body)
        if not self.scripts[agent]:
            return error(400, "invalid_request_error", f"the test has no script left for {agent}")
        turn = self.scripts[agent].popleft()
        return turn(body) if callable(turn) else turn


def _tool(name: str, **data):
    return reply(tool_use(name, data))


def _review(marker: str, reviewer: str, round_: int, verdict: str, fix: str | None = None):
    data = {"marker": marker, "review_pair": "code_review", "round": round_, "reviewer": reviewer,
            "verdict": verdict, "note": f"{reviewer}: {verdict}"}
    if fix:
        data["required_fix"] = fix
    return _tool("post_marker", **data)


def _first_user_text(body) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def _notes(experiment_id) -> list[str]:
    return [n for n in db.session.scalars(sa.select(WorkflowEvent.note).where(
        WorkflowEvent.entity_id == experiment_id).order_by(WorkflowEvent.created_at)) if n]


def _tool_results(agent: str) -> list[str]:
    run_ids = db.session.scalars(sa.select(AgentRun.id).where(AgentRun.agent == agent))
    return list(db.session.scalars(sa.select(RunEvent.body).where(
        RunEvent.run_id.in_(list(run_ids)), RunEvent.event_type == "tool_result").order_by(RunEvent.created_at)))


@pytest.fixture
def local_pods(app, live_server, monkeypatch):
    """Local pods that can reach the app over HTTP, in a folder `nobody` can walk into."""
    monkeypatch.setitem(app.config, "SAGAN_BASE_URL", live_server.url)
    pods_dir = tempfile.mkdtemp(prefix="sagan-local-pods-", dir="/tmp")
    os.chmod(pods_dir, 0o711)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", pods_dir)
    yield pods_dir
    shutil.rmtree(pods_dir, ignore_errors=True)


@pytest.mark.slow
def test_implementer_fixes_reviewers_iterate_tests_pass_and_the_pod_runs_that_commit(
        app, fake_anthropic, worker, local_pods, research_repo, make_experiment, client, owner):  # noqa: F811
    """The issue's journey: round 1 fix → review asks for more → round 2 passes → real tests →
    branch/commit spliced into the pod spec → a local pod checks out exactly that commit."""
    script = "git rev-parse HEAD > \"$SAGAN_ARTIFACT_DIR/commit.txt\" && python3 run.py"
    spec = {"name": "mean", "gpuType": "RTX4090", "gpuCount": 1, "containerDiskGb": 1, "estimatedMinutes": 1,
            "keepAliveMinutes": 0, "env": {"SEED": "1"},
            "dockerArgs": "bash -c \"$(echo " + base64.b64encode(script.encode()).decode() + " | base64 -d)\"",
            "config": {"command": "compute the mean", "artifacts": ["/workspace/sagan-artifacts/commit.txt",
                                                                    "/workspace/sagan-artifacts/metrics.json"]}}

    agents = Agents(app)
    fake_anthropic.default = agents
    agents.script("experiment-orchestrator", *[_tool("code_step")] * 6, reply(text("Pods finished; analysing next.")))
    agents.script(
        "experiment-implementer",
        _tool("read_file", path="stats.py"),
        _tool("run_command", command=TEST_COMMAND),
        _tool("write_file", path="stats.py", content=FIXED_STATS),
        _tool("run_command", command=TEST_COMMAND),
        _tool("git_commit", message="Divide the mean by the count, not the count + 1"),
        _tool("git_push"),
        _tool("post_marker", marker="epm:experiment-implementation", note="Fixed mean(); the tests pass.",
              metadata={"round": 1}),
        reply(text("Round 1 done.")),
        # round 2: the reviewer's fix, committed but not pushed (the test step pushes what it tested)
        _tool("apply_patch", patch=EMPTY_CHECK),
        _tool("run_command", command=TEST_COMMAND),
        _tool("git_commit", message="mean() of nothing raises ValueError"),
        _tool("post_marker", marker="epm:experiment-implementation", note="Empty input now raises ValueError.",
              metadata={"round": 2}),
        reply(text("Round 2 done.")))
    agents.script("code-reviewer",
                  _tool("git_diff"), _tool("run_command", command=TEST_COMMAND),
                  _review("epm:code-review", "code-reviewer", 1, "needs_targeted_fix", REQUIRED_FIX),
                  reply(text("Needs one fix.")),
                  _tool("git_diff"), _review("epm:code-review", "code-reviewer", 2, "pass"), reply(text("Passes.")))
    agents.script("code-plan-reviewer",
                  _review("epm:code-review-codex", "code-plan-reviewer", 1, "pass"), reply(text("Faithful.")),
                  _review("epm:code-review-codex", "code-plan-reviewer", 2, "pass"), reply(text("Still faithful.")))
    agents.script("pod-provisioner", _tool("launch_pods"),
                  _tool("post_marker", marker="epm:pod-dispatched", note="One local pod."),
                  _tool("wait_for_pods"), reply(text("The pod finished with exit 0.")))

    number = make_experiment("Fix the mean", status="planning", pod_account="local")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, plan(spec), Actor("owner"), source="owner")
        effects = approvals.approve(submission.approval, Actor("owner"), confirm_unchecked=True)
        db.session.commit()
        lifecycle.run_side_effects(effects)
        experiment_id = experiment.id

    worker()  # every agent and the test step, until the pod-provisioner waits for the pod
    with app.app_context():
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            db.session.expire_all()
            orchestrator = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-orchestrator"))
            if orchestrator.status in ("completed", "failed"):
                break
            watcher.watch()
            db.session.commit()
            worker()
            time.sleep(0.3)
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        notes = _notes(experiment_id)
        # This script's orchestrator stops after the pods ("analysing next") without starting the
        # analysis: the experiment would sit in Sagan's turn with nothing running, so the run
        # fails as run_incomplete and the owner gets a blocker saying so.
        assert (orchestrator.status, orchestrator.failure_reason) == ("failed", "run_incomplete"), notes[-8:]
        assert experiment.status == "blocked" and "run_incomplete" in notes[-1]

        # The loop's exact notes, in order.
        fix_note = "Round 1 reviewer pair landed needs_targeted_fix; dispatching implementer for round 2 fixes"
        splice_note = "Code review pair passed round 2; pod_spec branch/sha spliced; dispatching pod-provisioner"
        assert fix_note in notes and splice_note in notes
        assert notes.index(fix_note) < notes.index(splice_note)

        # Round 1: the implementer saw the failing test, fixed it, and saw it pass.
        results = _tool_results("experiment-implementer")
        assert "FAIL: test_mean_of_three_numbers" in results[1] and "[exit 1 after" in results[1]
        assert "Ran 2 tests" in results[3] and "OK" in results[3] and "[exit 0 after" in results[3]
        # Round 2's request carried the reviewer's required fix.
        round_two = [_first_user_text(b) for b in agents.requests["experiment-implementer"] if len(b["messages"]) == 1]
        assert len(round_two) == 2 and REQUIRED_FIX in round_two[1] and "Code round 2" in round_two[1]

        # Two commits; the second is what was tested, pushed and spliced.
        commits = list(db.session.scalars(sa.select(CodeCommit).order_by(CodeCommit.created_at)))
        assert [c.round for c in commits] == [1, 2], "\n----\n".join(results[6:])
        final = commits[-1].sha
        branch = f"experiment-{number}"
        assert research_repo.origin_sha(branch) == final
        assert all(c.pushed_at is not None for c in commits)
        verdict = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.marker == "epm:test-verdict"))
        assert verdict.metadata_["verdict"] == "pass" and verdict.metadata_["commit"] == final
        assert [c["role"] for c in verdict.metadata_["checks"]] == ["test", "lint"]
        assert "Ran 3 tests" in verdict.metadata_["output_tail"]

        # The branch and commit are on the experiment and in every pod's env, old names too.
        assert (experiment.git_branch, experiment.git_commit) == (branch, final)
        assert experiment.pod_spec["env"] == {"SEED": "1", "SAGAN_GIT_BRANCH": branch, "SAGAN_GIT_COMMIT": final,
                                              "SAGAN_EPS_BRANCH": branch, "SAGAN_EPS_COMMIT_SHA": final}

        # The local pod checked out exactly that commit and ran the fixed code.
        assert experiment.status_before_block in ("uploading", "verifying", "interpreting"), notes[-5:]
        artifacts = {a.name: a.content.decode() for a in db.session.scalars(sa.select(Artifact))}
        assert artifacts["commit.txt"].strip() == final
        assert artifacts["metrics.json"] == '{"mean": 2.0}'

        # Review rounds as the page's table reads them.
        loops = {loop.pair: loop for loop in markers.review_loops_for(experiment)}
        rounds = loops["code_review"].rounds
        assert rounds[1]["code-reviewer"]["verdict"] == "needs_targeted_fix"
        assert rounds[1]["code-plan-reviewer"]["verdict"] == "pass"
        assert rounds[2]["code-reviewer"]["verdict"] == rounds[2]["code-plan-reviewer"]["verdict"] == "pass"

    page = client.get(f"/experiments/{number}")
    assert page.status_code == 200
    html = page.text
    assert 'id="code"' in html and f"<code>{branch}</code>" in html and final[:12] in html
    assert "spliced into the pod spec" in html and "verdict-pass" in html
    assert "<code>stats.py</code>" in html and "<code>test_stats.py</code>" in html and 'class="diff-add"' in html
    assert "mean() of nothing raises ValueError" in html
    assert "needs targeted fix" in html  # the review rounds table


# --- restored pickup: an orchestrator that starts mid-way continues -------------------------------

ORCHESTRATOR = Actor("agent", "earlier-orchestrator", "experiment-orchestrator")


def _move(experiment, to: str, round_: int, **metadata):
    effects = lifecycle.transition(experiment, to, ORCHESTRATOR, note=f"(earlier) → {to}",
                                   metadata={"code_round": round_, **metadata})
    db.session.commit()
    return effects


def _marker(experiment, marker: str, agent: str, *, review: dict | None = None, metadata: dict | None = None):
    markers.post_marker(experiment, marker, Actor("agent", agent, agent), note=f"{agent} said so",
                        review=review, metadata=metadata)
    db.session.commit()


def _reviewed(experiment, agent: str, round_: int, verdict: str, fix: str | None = None):
    review = {"review_pair": "code_review", "round": round_, "reviewer": agent, "verdict": verdict}
    if fix:
        review["required_fix"] = fix
    _marker(experiment, implementation.REVIEWERS[agent], agent, review=review)


def _commit_row(experiment, sha: str, round_: int):
    db.session.add(CodeCommit(experiment_id=experiment.id, branch=f"experiment-{experiment.number}", sha=sha,
                              message=f"round {round_}", round=round_, diff=""))
    db.session.commit()


def _children(run_id) -> list[AgentRun]:
    return list(db.session.scalars(sa.select(AgentRun).where(AgentRun.parent_run_id == run_id)
                                   .order_by(AgentRun.created_at)))


@pytest.fixture
def mid_review(app, research_repo, make_experiment):  # noqa: F811
    """#n in code_reviewing round 2: round 1 asked for a fix, round 2's code-reviewer already passed."""
    number = make_experiment("Picked up mid-way", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _marker(experiment, "epm:experiment-implementation", "experiment-implementer", metadata={"round": 1})
        _commit_row(experiment, "a" * 40, 1)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "needs_targeted_fix", "handle empty input")
        _reviewed(experiment, "code-plan-reviewer", 1, "pass")
        _move(experiment, "implementing", 2)
        _marker(experiment, "epm:experiment-implementation", "experiment-implementer", metadata={"round": 2})
        _commit_row(experiment, "b" * 40, 2)
        _move(experiment, "code_reviewing", 2)
        _reviewed(experiment, "code-reviewer", 2, "pass")
        db.session.remove()
    return number


def test_restored_orchestrator_asks_only_the_missing_reviewer(app, mid_review):
    """A new orchestrator mid-review starts only the reviewer whose round-2 verdict is missing."""
    with app.app_context():
        ctx = tool_context(mid_review, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert not result.is_error and result.park, result.content
        children = _children(ctx.run.id)
        assert [c.agent for c in children] == ["code-plan-reviewer"]
        assert "Review code round 2" in children[0].request and "bbbbbbbbbbbb" in children[0].request
        assert "handle empty input" in children[0].request  # what round 1 asked for
        assert experiments.get_experiment(mid_review).status == "code_reviewing"
        # Another orchestrator (a recovery) waits for that reviewer instead of starting a second one.
        again = tool_context(mid_review, agent="experiment-orchestrator")
        second = call(again, "code_step")
        assert _children(again.run.id) == [] and second.park == {"children": [str(children[0].id)]}
        assert "already working" in second.content


def test_restored_orchestrator_after_passing_tests_splices_and_dispatches_once(app, research_repo, make_experiment):  # noqa: F811
    """At testing with a passing, pushed verdict, a new orchestrator splices and starts the provisioner."""
    number = make_experiment("Tested already", status="implementing")
    sha = "c" * 40
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.pod_spec = [{"name": "a", "env": {"X": "1"}}, {"name": "b"}]
        db.session.commit()
        _move(experiment, "code_reviewing", 2)
        _reviewed(experiment, "code-reviewer", 2, "pass")
        _reviewed(experiment, "code-plan-reviewer", 2, "pass")
        _move(experiment, "testing", 2)
        _marker(experiment, "epm:test-verdict", "code-tests",
                metadata={"verdict": "pass", "commit": sha, "branch": f"experiment-{number}", "pushed": True,
                          "round": 2})
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert "Code review pair passed round 2; pod_spec branch/sha spliced; dispatching pod-provisioner" \
            in result.content
        assert [c.agent for c in _children(ctx.run.id)] == ["pod-provisioner"]
        experiment = experiments.get_experiment(number)
        assert experiment.git_commit == sha and experiment.status == "testing"
        assert [p["env"]["SAGAN_GIT_COMMIT"] for p in experiment.pod_spec] == [sha, sha]
        assert experiment.pod_spec[0]["env"]["X"] == "1"
        assert experiment.pod_spec[1]["env"]["SAGAN_EPS_COMMIT_SHA"] == sha
        # Picking up again while the provisioner works: no second splice, no second provisioner.
        again = tool_context(number, agent="experiment-orchestrator")
        call(again, "code_step")
        assert _children(again.run.id) == []
        assert _notes(experiment.id).count(
            "Code review pair passed round 2; pod_spec branch/sha spliced; dispatching pod-provisioner") == 1


def test_after_round_three_the_reconciler_fix_goes_to_tests_without_another_review(app, research_repo,  # noqa: F811
                                                                                  make_experiment):
    """Round 3 without two passes → reconciler → its minimal fix → tests, never a round-4 review."""
    number = make_experiment("Three rounds", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _commit_row(experiment, "d" * 40, 3)
        _move(experiment, "code_reviewing", 3)
        _reviewed(experiment, "code-reviewer", 3, "needs_targeted_fix", "rename x")
        _reviewed(experiment, "code-plan-reviewer", 3, "pass")
        ctx = tool_context(number, agent="experiment-orchestrator")
        assert [c.agent for c in (call(ctx, "code_step"), _children(ctx.run.id))[1]] == ["reconciler"]
        assert "round 3: disagreement alone cannot block" in _children(ctx.run.id)[0].request.lower()
        _marker(experiment, "epm:code-review-reconcile", "reconciler",
                review={"review_pair": "code_review", "round": 3, "reviewer": "reconciler",
                        "verdict": "needs_targeted_fix", "reconciler_decision": "Only rename x to total."})
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert "reconciler picked the minimal fix" in result.content
        implementer = _children(ctx.run.id)
        assert [c.agent for c in implementer] == ["experiment-implementer"]
        assert "Only rename x to total." in implementer[0].request
        _marker(experiment, "epm:experiment-implementation", "experiment-implementer", metadata={"round": 3})
        _commit_row(experiment, "e" * 40, 3)
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert "no further review after round 3" in result.content
        assert [c.agent for c in _children(ctx.run.id)] == ["code-tests"]
        assert experiments.get_experiment(number).status == "testing"


def test_failing_tests_send_the_implementer_a_next_round_with_the_output(app, research_repo, make_experiment,  # noqa: F811
                                                                         worker):
    """The test step runs the real tests (they fail on main), and the loop starts round 2 with the output."""
    number = make_experiment("Tests fail", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "pass")
        _reviewed(experiment, "code-plan-reviewer", 1, "pass")
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert "Code review pair passed round 1; running the repository's tests" in result.content
        test_step = _children(ctx.run.id)[0]
        assert test_step.agent == "code-tests" and test_step.provider == "sagan"
        test_step_id = test_step.id
        from services.workflow import jobs
        jobs.enqueue_run(test_step_id)
    worker()
    with app.app_context():
        db.session.expire_all()
        step = db.session.get(AgentRun, test_step_id)
        assert step.status == "completed"
        verdict = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.marker == "epm:test-verdict"))
        assert verdict.metadata_["verdict"] == "fail" and verdict.metadata_["pushed"] is False
        assert "FAIL: test_mean_of_three_numbers" in verdict.metadata_["output_tail"]
        assert research_repo.origin_sha(f"experiment-{number}") is None  # nothing failing is pushed
        events = [e for e, in db.session.execute(sa.select(RunEvent.event_type).where(
            RunEvent.run_id == step.id).order_by(RunEvent.seq))]
        assert events == ["started", "tool_call", "tool_result", "tool_call", "tool_result", "completed"]
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        sha = verdict.metadata_["commit"]
        assert f"Tests failed on {sha[:12]} in round 1; dispatching implementer for round 2 fixes" in result.content
        implementer = _children(ctx.run.id)[0]
        assert "Code round 2" in implementer.request and "FAIL: test_mean_of_three_numbers" in implementer.request
        assert code_state.current_round(experiments.get_experiment(number)) == 2


def test_reconciler_block_decision_blocks_the_experiment(app, research_repo, make_experiment):  # noqa: F811
    """A reviewer asking for the owner → reconciler; its blocked_needs_user_decision blocks with the reason."""
    number = make_experiment("Needs the owner", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "pass")
        _reviewed(experiment, "code-plan-reviewer", 1, "blocked_needs_user_decision", "Which baseline?")
        ctx = tool_context(number, agent="experiment-orchestrator")
        call(ctx, "code_step")
        assert [c.agent for c in _children(ctx.run.id)] == ["reconciler"]
        _marker(experiment, "epm:code-review-reconcile", "reconciler",
                review={"review_pair": "code_review", "round": 1, "reviewer": "reconciler",
                        "verdict": "blocked_needs_user_decision", "reconciler_decision": "The plan names no baseline."})
        call(tool_context(number, agent="experiment-orchestrator"), "code_step")
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        assert "The plan names no baseline." in _notes(experiment.id)[-1]


def test_code_step_without_a_research_repository_explains_the_manual_path(app, make_experiment):
    """No repository configured: the tool says to use the spec's branch/commit, and moves nothing."""
    number = make_experiment("No repo", status="implementing")
    with app.app_context():
        assert settings.get("research_repo_url") is None
        result = call(tool_context(number, agent="experiment-orchestrator"), "code_step")
        assert result.is_error and "No research repository is configured" in result.content
        assert experiments.get_experiment(number).status == "implementing"


def test_only_the_orchestrator_may_drive_the_loop_and_code_agents_run_on_the_local_queue(app, make_experiment):
    """code_step is refused to other agents; code agents and the test step are routed to `local`."""
    number = make_experiment("Routing", status="implementing")
    with app.app_context():
        result = call(tool_context(number, agent="code-reviewer"), "code_step")
        assert result.is_error and result.content.startswith("tool_not_allowed:")
        assert jobs.job_for("experiment-implementer")[0] == "local"
        assert jobs.job_for("code-reviewer")[0] == "local"
        assert jobs.job_for("code-tests") == ("local", "workers.code.run_test_step")
        assert jobs.job_for("experiment-orchestrator")[0] == "agents"
        assert jobs.job_for("analyzer")[0] == "agents"


def test_an_implementer_round_without_a_commit_is_asked_again_then_blocks(app, research_repo, make_experiment):  # noqa: F811
    """A round whose implementer commits nothing is not reviewed: asked once more, then the owner decides."""
    number = make_experiment("Nothing committed", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _commit_row(experiment, "f" * 40, 1)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "needs_targeted_fix", "add a test")
        _reviewed(experiment, "code-plan-reviewer", 1, "pass")
        from services.workflow import runs
        for attempt in (1, 2):
            ctx = tool_context(number, agent="experiment-orchestrator")
            result = call(ctx, "code_step")
            (child,) = _children(ctx.run.id)
            assert child.agent == "experiment-implementer", result.content
            runs.set_status(child, "completed")
            db.session.commit()
            _marker(experiment, "epm:experiment-implementation", "experiment-implementer", metadata={"round": 2})
        result = call(tool_context(number, agent="experiment-orchestrator"), "code_step")
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked", result.content
        assert "experiment-implementer ended 2 times in code round 2 without posting a commit" in _notes(experiment.id)[-1]


def test_back_at_approved_after_a_gate_the_tested_code_is_dispatched_not_redone(app, research_repo,  # noqa: F811
                                                                                 make_experiment):
    """A dispatch gate (or a block) sends the experiment back to approved: no new code round starts."""
    number = make_experiment("Gated", status="implementing")
    sha = "9" * 40
    with app.app_context():
        experiment = experiments.get_experiment(number)
        _move(experiment, "code_reviewing", 1)
        _reviewed(experiment, "code-reviewer", 1, "pass")
        _reviewed(experiment, "code-plan-reviewer", 1, "pass")
        _move(experiment, "testing", 1)
        _marker(experiment, "epm:test-verdict", "code-tests",
                metadata={"verdict": "pass", "commit": sha, "branch": f"experiment-{number}", "pushed": True,
                          "round": 1})
        call(tool_context(number, agent="experiment-orchestrator"), "code_step")  # splices, starts the provisioner
        for run in db.session.scalars(sa.select(AgentRun).where(AgentRun.agent == "pod-provisioner")):
            run.status = "completed"
        lifecycle.transition(experiment, "gate_pending", Actor.system(), note="Dispatch paused: a fleet incident.")
        lifecycle.transition(experiment, "approved", Actor("owner", None, "Owner"), note="Resolved.")
        db.session.commit()
        ctx = tool_context(number, agent="experiment-orchestrator")
        result = call(ctx, "code_step")
        assert "already passed review and tests; dispatching pod-provisioner" in result.content
        assert [c.agent for c in _children(ctx.run.id)] == ["pod-provisioner"]
        assert experiments.get_experiment(number).status == "approved"
        assert code_state.current_round(experiments.get_experiment(number)) == 1
