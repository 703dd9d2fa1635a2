"""Agent runs end to end: real PostgreSQL and Redis, jobs run by a real RQ worker in burst
mode, the app's real `anthropic` client talking to the loopback fake over HTTP."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, RunEvent, WorkflowEvent, db
from services.core import clock
from services.core.actors import Actor
from services.dispatch import recovery
from services.pipeline import sweeps
from services.planning import approvals
from services.workflow import experiments, lifecycle, orchestration, parking, runs
from tests.fakes.anthropic_server import error, reply, text, tool_use

PLAN = open(__import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "plans" /
            "two_pod_seed_sweep.md").read().replace('"gpuType": "RTX 4090"', '"gpuType": "A100"')


def _events(run_id):
    return [(e.event_type, e.body) for e in db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq))]


def _run(run_id):
    db.session.expire_all()
    return db.session.get(AgentRun, run_id)


def _start_planner(app, number, mode="clarify"):
    with app.app_context():
        run = orchestration.start_planner(experiments.get_experiment(number).id, Actor("owner"), {}, mode=mode)
        return run.id


def test_planner_asks_questions(app, fake_anthropic, worker, make_experiment):
    """A planner run that asks questions moves the experiment to awaiting_clarifications."""
    number = make_experiment("Vague idea", status="clarifying")
    fake_anthropic.script(
        reply(text("I need two answers first."), tool_use("ask_questions", {"questions": [
            {"key": "base-model", "text": "Which base model?"}, {"key": "budget", "text": "What budget?"}]})),
        reply(text("never asked for: the run ends with the questions")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        run = _run(run_id)
        # ask_questions ends the run in the same commit as the questions (no second model call).
        assert run.status == "completed" and run.turns == 1
        usage = fake_anthropic.responses[0]["usage"]  # the run records what the API reported
        assert (run.input_tokens, run.output_tokens) == (usage["input_tokens"], usage["output_tokens"])
        assert run.cache_creation_input_tokens == usage["cache_creation_input_tokens"] > 0
        assert experiments.get_experiment(number).status == "awaiting_clarifications"
        kinds = [k for k, _ in _events(run_id)]
        assert kinds == ["started", "assistant_text", "tool_call", "tool_result", "sdk_result", "completed"]
        # Sonnet 5.5 returns the text before a tool call inside the thinking block: it is
        # shown because the loop asks for the summarized display.
        narration = db.session.scalar(sa.select(RunEvent).where(RunEvent.run_id == run_id,
                                                                 RunEvent.event_type == "assistant_text"))
        assert narration.body == "I need two answers first." and narration.metadata_ == {"thinking": True}
    first = fake_anthropic.requests[0].body
    assert "Vague idea" in first["messages"][0]["content"][0]["text"]
    assert {t["name"] for t in first["tools"]} >= {"ask_questions", "submit_plan"}
    assert first["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert first["output_config"] == {"effort": "high"} and first["stream"] is True
    assert not {"temperature", "top_p", "top_k", "tool_choice"} & set(first)
    assert len(fake_anthropic.requests) == 1 and fake_anthropic.remaining() == 1


def test_planner_submits_plan_that_becomes_an_approval(app, fake_anthropic, worker, make_experiment):
    """A valid plan lands as an approval request; the plan run waits as awaiting_approval."""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    fake_anthropic.script(reply(tool_use("submit_plan", {"markdown": PLAN})), reply(text("Plan submitted.")))
    run_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "awaiting_approval" and run.plan_md.startswith("Scoping is done")
        approval = db.session.scalar(sa.select(ApprovalRequest))
        assert approval.agent_run_id == run_id and approval.status == "pending"
        assert experiments.get_experiment(number).status == "plan_pending"


def test_bad_tool_input_is_an_error_result_not_a_crash(app, fake_anthropic, worker, make_experiment):
    """Does a tool call with bad input come back to the model as is_error, the run going on?
    A planner that then gives up without a plan or questions hands the owner a blocker."""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    fake_anthropic.script(reply(tool_use("post_marker", {"marker": "epm:plan", "next_status": "shared"})),
                          reply(tool_use("post_marker", {"marker": "epm:nope"})),
                          reply(text("Giving up.")))
    run_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        results = [b for k, b in _events(run_id) if k == "tool_result"]
        assert "cannot move from planning to shared as agent" in results[0]
        assert results[1].startswith("invalid_input") or "epm:nope" in results[1]
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "run_incomplete"
        assert run.last_error.startswith("The planner ended without asking the owner questions or submitting")
        assert "Giving up." in run.last_error
        assert experiments.get_experiment(number).status == "blocked"  # the owner's turn, with the reason
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
        assert "run_incomplete" in note
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 1  # no automatic recovery


def test_orchestrator_parks_for_a_sub_agent_and_is_woken(app, fake_anthropic, worker, make_experiment):
    """spawn_agent parks the parent; the child's completion wakes it; it finishes."""
    number = make_experiment("Analysis", status="interpreting")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        parent = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Analyse.",
                                 scope_id=experiment.id)
        db.session.commit()
        parent_id = parent.id
        from services.workflow import jobs
        jobs.enqueue_run(parent_id)
    fake_anthropic.script(
        reply(tool_use("spawn_agent", {"agent": "analyzer", "request": "Interpret the results."})),
        reply(text("Interpretation: the prediction held.")),           # the analyzer (child)
        reply(text("The analyzer finished; the owner reviews next."),   # the parent, woken
              tool_use("post_marker", {"marker": "epm:interpretation", "next_status": "reviewing"})),
        reply(text("Handed to the owner.")))
    worker()
    with app.app_context():
        parent = _run(parent_id)
        child = db.session.scalar(sa.select(AgentRun).where(AgentRun.parent_run_id == parent_id))
        assert child.status == "completed" and child.agent == "analyzer"
        assert parent.status == "completed"
        kinds = [k for k, _ in _events(parent_id)]
        assert "waiting" in kinds and "woken" in kinds
        woken = [b for k, b in _events(parent_id) if k == "woken"][0]
        assert "Interpretation: the prediction held." in woken
        assert experiments.get_experiment(number).status == "reviewing"
    # The woken parent continued the same conversation: its first turn came back unchanged
    # (thinking signature included), and the child's outcome came back in the result of the
    # call that started it, no made-up turn.
    parent_calls = [r.body for r in fake_anthropic.requests if "spawn_agent" in {t["name"] for t in r.body["tools"]}]
    woken_call = parent_calls[1]["messages"]
    assert [m["role"] for m in woken_call] == ["user", "assistant", "user"]
    assert woken_call[1]["content"] == fake_anthropic.responses[0]["content"]
    assert woken_call[1]["content"][0]["type"] == "thinking" and woken_call[1]["content"][0]["signature"]
    (result,) = woken_call[2]["content"]
    assert result["type"] == "tool_result" and result["is_error"] is False
    assert result["content"].startswith("Started analyzer as run ")
    assert "Sub-agent analyzer" in result["content"] and "ended completed: Interpretation: the prediction held." \
        in result["content"]


def test_launch_pods_without_an_approved_spec_is_an_error_result(app, fake_anthropic, worker, make_experiment):
    """launch_pods refuses when no approved spec exists; the model reads why and the run goes on."""
    number = make_experiment("Pods", status="implementing")
    with app.app_context():
        # The walk to implementing approved a demo plan: take the approval away again.
        experiment = experiments.get_experiment(number)
        db.session.execute(sa.delete(ApprovalRequest).where(ApprovalRequest.experiment_id == experiment.id))
        experiment.pod_spec = None
        run = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Go.",
                              scope_id=experiment.id)
        db.session.commit()
        run_id = run.id
        from services.workflow import jobs
        jobs.enqueue_run(run_id)
    fake_anthropic.script(reply(tool_use("launch_pods", {})), reply(text("Blocked: nothing approved to launch.")))
    worker()
    with app.app_context():
        result = [b for k, b in _events(run_id) if k == "tool_result"][0]
        assert result.startswith("no_approved_spec:")
        # It stopped with the experiment in Sagan's turn and nothing running: the owner is told.
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "run_incomplete"
        assert "Blocked: nothing approved to launch." in run.last_error
        assert experiments.get_experiment(number).status == "blocked"


def test_cancel_mid_run_blocks_the_experiment(app, fake_anthropic, worker, make_experiment):
    """The owner cancels while a step is in flight: the loop stops before the next step."""
    number = make_experiment("Cancel me", status="planning")
    run_id = _start_planner(app, number, "plan")

    def cancel_then_answer(body):
        with app.app_context():
            runs.cancel_run(_run(run_id), Actor("owner", "o", "Owner"))
            db.session.commit()
        return reply(tool_use("list_events", {}))
    fake_anthropic.script(cancel_then_answer, reply(text("never reached")))
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "cancelled" and run.failure_reason == "cancelled_by_owner"
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
        assert note == "Run cancelled by owner"
    assert fake_anthropic.remaining() == 1  # the second model call never happened


def test_model_api_errors_retried_then_clear_failure(app, fake_anthropic, worker, make_experiment):
    """429 then 500s: retried by the client, then the run fails with model_api_error and a message."""
    number = make_experiment("Flaky API", status="planning")
    fake_anthropic.script(error(429, "rate_limit_error", "slow down", retry_after=0),
                          *[error(500, "api_error", "internal boom", retry_after=0) for _ in range(3)])
    run_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "model_api_error"
        assert "500" in run.last_error and "internal boom" in run.last_error
    assert len(fake_anthropic.requests) == 3  # one call plus MODEL_MAX_RETRIES=2 retries


def test_api_error_recovered_once_then_succeeds(app, fake_anthropic, worker, make_experiment):
    """A failed run queues one recovery with the exact template, which runs after its back-off."""
    number = make_experiment("Recover me", status="planning", pod_account="personal")
    fake_anthropic.script(*[error(500, "api_error", "down", retry_after=0) for _ in range(3)])
    run_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        follow = db.session.scalar(sa.select(AgentRun).where(AgentRun.resumes_run_id == run_id))
        assert follow.status == "waiting"
        assert follow.request.startswith(f"[auto-recovery-for:{run_id}]\n\nThe previous run failed or crashed.")
        assert "Original request:\nDraft the plan now" in follow.request
        assert "Failure or crash reason:\nmodel_api_error: " in follow.request
        note = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.note.like("Automatic recovery%")))
        assert note.note == f"Automatic recovery queued after agent run {str(run_id)[:8]} failed."
        assert note.metadata_ == {"mode": "recovery", "sourceAgentRunId": str(run_id),
                                  "followupAgentRunId": str(follow.id), "reason": "model_api_error"}
        assert parking.wake_ready_runs() == []           # back-off: 1 minute
        clock.advance(timedelta(minutes=2))
        assert parking.wake_ready_runs() == [follow.id]
    fake_anthropic.script(reply(tool_use("submit_plan", {"markdown": PLAN})), reply(text("Recovered; plan submitted.")))
    worker()
    with app.app_context():
        assert _run(follow.id).status == "awaiting_approval", _run(follow.id).last_error
        assert experiments.get_experiment(number).status == "plan_pending"


def test_recovery_budget_spent_gives_one_blocker(app, make_experiment):
    """After three recoveries in 24 h, the next failure blocks once, listing the chain."""
    number = make_experiment("Doomed", status="implementing")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Go.", scope_id=experiment.id)
        db.session.commit()
        for _ in range(3):
            run.status = "running"
            outcome = recovery.fail(run, "agent_error", "tool crashed")
            db.session.commit()
            assert outcome.recovery is not None
            run = outcome.recovery
        run.status = "running"
        outcome = recovery.fail(run, "agent_error", "tool crashed again")
        db.session.commit()
        assert outcome.recovery is None
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        blockers = list(db.session.scalars(sa.select(WorkflowEvent).where(WorkflowEvent.to_status == "blocked")))
        assert len(blockers) == 1
        assert "automatic recovery budget spent" in blockers[0].note
        assert blockers[0].note.count("→") == 3
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 4


@pytest.mark.parametrize("reason", ["spec_invalid", "provider_auth", "cancelled_by_owner", "partial_dispatch"])
def test_unrecoverable_reasons_block_without_recovery(app, make_experiment, reason):
    """Do unrecoverable reasons cascade straight to blocked ("Cascaded from agent_run …")?"""
    number = make_experiment("No retry", status="implementing")
    with app.app_context():
        run = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Go.",
                              scope_id=experiments.get_experiment(number).id)
        outcome = recovery.fail(run, reason, "nope")
        db.session.commit()
        assert outcome.recovery is None
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
        assert note.startswith(f"Cascaded from agent_run {run.short_id} failed ({reason}")


def test_stale_running_run_is_lost_and_recovered_once(app, make_experiment):
    """A running run without heartbeat is failed worker_lost once, with one recovery, even if
    the reconciler runs twice."""
    number = make_experiment("Crashed worker", status="implementing")
    with app.app_context():
        run = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Go.",
                              scope_id=experiments.get_experiment(number).id)
        runs.set_status(run, "running")
        run.heartbeat_at = clock.utcnow()
        db.session.commit()
        assert sweeps.reconcile_runs()["lost"] == []
        clock.advance(timedelta(minutes=6))
        assert sweeps.reconcile_runs()["lost"] == [run.id]
        assert sweeps.reconcile_runs()["lost"] == []
        assert _run(run.id).failure_reason == "worker_lost"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
            AgentRun.resumes_run_id == run.id)) == 1


def test_reconciler_requeues_queued_runs_after_redis_flush(app, make_experiment):
    """A queued run whose job vanished (Redis flushed) is enqueued again."""
    from services.core import redis_store
    from services.workflow import jobs
    number = make_experiment("Flushed", status="planning")
    with app.app_context():
        run = runs.create_run(kind="plan", agent="experiment-planner", request="Plan.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        jobs.enqueue_run(run.id)
        redis_store.connection().flushdb()
        assert not jobs.job_is_live(_run(run.id).rq_job_id)
        assert sweeps.reconcile_runs()["requeued"] == [run.id]
        assert jobs.job_is_live(_run(run.id).rq_job_id)
        assert sweeps.reconcile_runs()["requeued"] == []  # one job, not two


def test_secrets_in_tool_results_are_redacted(app, fake_anthropic, worker, make_experiment):
    """A secret in what a tool returns never reaches the model or the log; a secret the model
    writes itself is redacted in the events, while its turn is stored as the API sent it."""
    secret = "sk_live_AbCdEfGhIjKlMnOpQrSt123456"
    number = make_experiment("Leaky", status="planning", hypothesis=f"Uses SAGAN_API_TOKEN={secret} somewhere")
    fake_anthropic.script(reply(tool_use("get_experiment", {})),
                          reply(text(f"Found in .env: SAGAN_API_TOKEN={secret} and Authorization: Bearer {secret}")))
    run_id = _start_planner(app, number, "plan")
    worker()
    assert all(secret not in json.dumps(r.body) for r in fake_anthropic.requests)  # brief and tool result
    with app.app_context():
        stored = db.session.execute(sa.text(
            "SELECT string_agg(coalesce(body, ''), ' ') FROM run_events")).scalar()
        assert secret not in stored and "[REDACTED]" in stored
        conversation = _run(run_id).conversation
        assert secret not in json.dumps(conversation[:3])  # brief, tool call, tool result
        # The model's own last turn is kept exactly (thinking signatures must come back unchanged).
        assert conversation[3]["content"] == fake_anthropic.responses[1]["content"]


def test_no_api_key_explains_instead_of_starting(app, make_experiment):
    """Without ANTHROPIC_API_KEY the planner does not start and the timeline says why."""
    number = make_experiment("No key", status="clarifying")
    with app.app_context():
        assert orchestration.start_planner(experiments.get_experiment(number).id, Actor("owner"), {},
                                           mode="clarify") is None
        note = db.session.scalar(sa.select(WorkflowEvent.note).order_by(WorkflowEvent.created_at.desc()).limit(1))
        assert note.startswith("No ANTHROPIC_API_KEY is configured, so the planner cannot start.")
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 0


def test_max_turns_fails_the_run(app, fake_anthropic, worker, make_experiment):
    """A run that keeps calling tools stops at its definition's max_turns with max_turns."""
    number = make_experiment("Chatty", status="planning")
    fake_anthropic.default = reply(tool_use("get_experiment", {}))
    run_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "max_turns" and run.turns == 40


def test_pages_say_when_agents_are_off(app, client, owner, make_experiment):
    """Do the board and the experiment page explain that no API key is configured (and not when one is)?"""
    number = make_experiment("Idea")
    assert "Agents are off" in client.get("/board").text
    assert "Agents are off" in client.get(f"/experiments/{number}").text
    app.config["ANTHROPIC_API_KEY"] = "sk-ant-test-0000000000000000"
    try:
        assert "Agents are off" not in client.get("/board").text
    finally:
        app.config["ANTHROPIC_API_KEY"] = ""


def test_a_missing_agent_definition_fails_the_run_once(app, fake_anthropic, worker, make_experiment):
    """A run naming an agent that does not exist fails with agent_error instead of retrying forever."""
    number = make_experiment("Bad agent", status="implementing")
    with app.app_context():
        run = runs.create_run(kind="apply", agent="no-such-agent", request="Go.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        run_id = run.id
        from services.workflow import jobs
        jobs.enqueue_run(run_id)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "agent_error"
        assert "no-such-agent" in run.last_error
    assert fake_anthropic.requests == []


def test_a_tool_outside_the_agents_list_is_refused(app, fake_anthropic, worker, make_experiment):
    """A planner asking for launch_pods (not one of its tools) gets an error result, nothing runs."""
    number = make_experiment("Sneaky", status="planning")
    fake_anthropic.script(reply(tool_use("launch_pods", {})), reply(text("ok")))
    run_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        result = [b for k, b in _events(run_id) if k == "tool_result"][0]
        assert "launch_pods is not one of this agent's tools" in result
        from models import AgentRun as Run
        assert db.session.scalar(sa.select(sa.func.count(Run.id)).where(Run.kind == "experiment")) == 0


def test_resolving_a_gate_restarts_the_orchestrator(app, make_experiment):
    """gate_pending → approved (the owner raised the cap) starts the orchestrator again."""
    from services.workflow import lifecycle
    number = make_experiment("Gated", status="approved")
    app.config["ANTHROPIC_API_KEY"] = "sk-ant-test-0000000000000000"
    try:
        with app.app_context():
            experiment = experiments.get_experiment(number)
            lifecycle.transition(experiment, "gate_pending", Actor.system(), note="cap")
            effects = lifecycle.transition(experiment, "approved", Actor("owner", "o", "Owner"))
            db.session.commit()
            lifecycle.run_side_effects(effects)
            experiment = experiments.get_experiment(number)
            assert experiment.status == "implementing"
            assert db.session.scalar(sa.select(AgentRun).where(AgentRun.kind == "apply")).status == "queued"
    finally:
        app.config["ANTHROPIC_API_KEY"] = ""


def test_a_rejection_during_the_planners_last_turn_starts_the_revision_as_it_ends(
        app, fake_anthropic, worker, make_experiment):
    """The owner rejects the plan just submitted while its planner is still on its last turn
    (the run is active, so no second planner may start). The revision waits on that run and
    starts as it ends; it was dropped, leaving the experiment in planning with nothing running."""
    number = make_experiment("Rejected mid-turn", status="planning", pod_account="personal")

    def owner_rejects_then_the_planner_ends(body):
        with app.app_context():
            approval = db.session.scalar(sa.select(ApprovalRequest).where(ApprovalRequest.status == "pending"))
            effects = approvals.reject(approval, Actor("owner", "owner-1", "Owner"), note="Use three seeds.")
            db.session.commit()
            lifecycle.run_side_effects(effects)
            assert experiments.get_experiment(number).status == "planning"
        return reply(text("Plan submitted."))

    fake_anthropic.script(reply(tool_use("submit_plan", {"markdown": PLAN})), owner_rejects_then_the_planner_ends,
                          reply(tool_use("submit_plan", {"markdown": PLAN})), reply(text("Revised plan submitted.")))
    first_id = _start_planner(app, number, "plan")
    worker()
    with app.app_context():
        plan_runs = list(db.session.scalars(sa.select(AgentRun).where(AgentRun.kind == "plan")
                                            .order_by(AgentRun.created_at)))
        assert [r.id for r in plan_runs][0] == first_id and len(plan_runs) == 2
        assert "Use three seeds." in plan_runs[1].request
        assert [t for t, _ in _events(first_id)].count(orchestration.QUEUED_PLANNING_EVENT) == 1
        assert experiments.get_experiment(number).status == "plan_pending"
        notes = db.session.scalars(sa.select(WorkflowEvent.note).where(WorkflowEvent.event_type == "note")).all()
        assert any("is finishing its last turn" in (n or "") for n in notes)


def test_cancelling_a_planner_says_the_planning_request_waiting_on_it_is_dropped(app, fake_anthropic,
                                                                                  make_experiment):
    """The timeline said a new planning run starts when the finishing planner ends; the owner
    then cancels that planner: the experiment is blocked, nothing starts, and the timeline
    says the waiting request is dropped (it was dropped silently)."""
    number = make_experiment("Cancelled while a revision waits", status="planning")
    first_id = _start_planner(app, number, "plan")
    owner = Actor("owner", "owner-1", "Owner")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert orchestration.start_planner(experiment.id, owner, {"note": "Use three seeds."}, mode="plan") is None
        effects = runs.cancel_run(db.session.get(AgentRun, first_id), owner)
        db.session.commit()
        lifecycle.run_side_effects(effects)
        assert experiments.get_experiment(number).status == "blocked"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 1
        notes = db.session.scalars(sa.select(WorkflowEvent.note).where(WorkflowEvent.event_type == "note")).all()
        assert any(f"The planning request that waited on run {str(first_id)[:8]} is dropped with the cancel" in (n or "")
                   for n in notes)


def test_cancelling_a_planner_with_nothing_waiting_adds_no_such_note(app, fake_anthropic, make_experiment):
    number = make_experiment("Cancelled alone", status="planning")
    first_id = _start_planner(app, number, "plan")
    with app.app_context():
        effects = runs.cancel_run(db.session.get(AgentRun, first_id), Actor("owner", "owner-1", "Owner"))
        db.session.commit()
        lifecycle.run_side_effects(effects)
        notes = db.session.scalars(sa.select(WorkflowEvent.note).where(WorkflowEvent.event_type == "note")).all()
        assert not any("is dropped with the cancel" in (n or "") for n in notes)


def test_the_planners_own_move_never_queues_a_second_planner(app, fake_anthropic, make_experiment):
    """A planner moving its experiment on (clarifying → planning) is not a new request."""
    number = make_experiment("Own move", status="clarifying")
    first_id = _start_planner(app, number, "clarify")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        planner = Actor("agent", str(first_id), orchestration.PLANNER)
        assert orchestration.start_planner(experiment.id, planner, {}, mode="plan") is None
        assert orchestration.QUEUED_PLANNING_EVENT not in [t for t, _ in _events(first_id)]
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 1
