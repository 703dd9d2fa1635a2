"""Sub-agents started in parallel: a parent that starts two sub-agents in one turn waits for
both and reads each one's result as its own tool result — whichever ends first, when one
fails, and when the owner cancels the parent while they run. Real PostgreSQL and Redis, jobs
run by a real RQ worker, the app's real `anthropic` client talking to the faithful fake."""
from __future__ import annotations

from collections import deque

import sqlalchemy as sa

from models import AgentRun, RunEvent, WorkflowEvent, db
from services.claude import loader
from services.core.actors import Actor
from services.workflow import experiments, jobs, runs
from tests.fakes.anthropic_server import refusal, reply, system_text, text, tool_use

ORCHESTRATOR, ANALYZER, CRITIC = "experiment-orchestrator", "analyzer", "interpretation-critic"
SPAWN_BOTH = reply(text("Both at once."),
                   tool_use("spawn_agent", {"agent": ANALYZER, "request": "Interpret the results."}),
                   tool_use("spawn_agent", {"agent": CRITIC, "request": "Critique the interpretation."}))
HAND_OVER = [reply(tool_use("post_marker", {"marker": "epm:interpretation", "next_status": "reviewing"})),
             reply(text("Handed to the owner."))]


def by_agent(scripts: dict[str, list]):
    """A fake turn that answers each agent from its own script, told apart by its system
    prompt as the real API would see it; a scripted callable answers from the request."""
    prompts = {loader.get(name).prompt: name for name in scripts}
    queues = {name: deque(turns) for name, turns in scripts.items()}

    def answer(body):
        turn = queues[prompts[system_text(body)]].popleft()
        return turn(body) if callable(turn) else turn
    answer.queues = queues
    return answer


def _start_parent(app, make_experiment) -> tuple[int, object]:
    number = make_experiment("Two sub-agents", status="interpreting")
    with app.app_context():
        parent = runs.create_run(kind="apply", agent=ORCHESTRATOR, request="Interpret, with a critic.",
                                 scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        jobs.enqueue_run(parent.id)
        return number, parent.id


def _run(run_id) -> AgentRun:
    db.session.expire_all()
    return db.session.get(AgentRun, run_id)


def _children(parent_id) -> dict[str, AgentRun]:
    db.session.expire_all()
    return {c.agent: c for c in db.session.scalars(sa.select(AgentRun).where(AgentRun.parent_run_id == parent_id))}


def _events(run_id, kind) -> list[RunEvent]:
    return list(db.session.scalars(sa.select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.event_type == kind)
                                   .order_by(RunEvent.seq)))


def _parent_calls(fake) -> list[dict]:
    prompt = loader.get(ORCHESTRATOR).prompt
    return [r.body for r in fake.requests if system_text(r.body) == prompt]


def _results_of_the_woken_call(fake) -> list[dict]:
    """The tool results the parent's second call carried, in the order it asked for them."""
    woken = _parent_calls(fake)[1]["messages"]
    assert [m["role"] for m in woken] == ["user", "assistant", "user"]
    return [b for b in woken[2]["content"] if b["type"] == "tool_result"]


def _move_to_front(agent_queue, job_id: str) -> None:
    """Put a queued job first, so the worker runs it before the ones queued ahead of it."""
    agent_queue.remove(job_id)
    agent_queue.push_job_id(job_id, at_front=True)


def test_a_parent_that_starts_two_sub_agents_waits_for_both_and_reads_both(app, fake_anthropic, worker,
                                                                           make_experiment):
    """Two spawn_agent calls in one turn: the parent is not woken when the first child ends,
    only when both have; each child's final text comes back in its own tool result."""
    number, parent_id = _start_parent(app, make_experiment)
    fake_anthropic.default = by_agent({
        ORCHESTRATOR: [SPAWN_BOTH, *HAND_OVER],
        ANALYZER: [reply(text("Interpretation: the prediction held."))],
        CRITIC: [reply(text("Critique: the claims match the numbers."))]})
    worker()
    with app.app_context():
        children = _children(parent_id)
        assert {a: c.status for a, c in children.items()} == {ANALYZER: "completed", CRITIC: "completed"}
        parent = _run(parent_id)
        assert parent.status == "completed" and parent.waiting_for is None
        waiting = _events(parent_id, "waiting")
        assert len(waiting) == 1 and waiting[0].body == "waiting for 2 sub-agent run(s)"
        assert sorted(waiting[0].metadata_["waiting_for"]["children"]) == sorted(str(c.id) for c in children.values())
        woken = _events(parent_id, "woken")
        assert len(woken) == 1  # once, after both: never after the first alone
        assert "the prediction held" in woken[0].body and "the claims match the numbers" in woken[0].body
        assert experiments.get_experiment(number).status == "reviewing"
    analyzer_result, critic_result = _results_of_the_woken_call(fake_anthropic)
    assert "Sub-agent analyzer" in analyzer_result["content"] and "the prediction held" in analyzer_result["content"]
    assert "Sub-agent interpretation-critic" in critic_result["content"]
    assert "the claims match the numbers" in critic_result["content"]
    assert analyzer_result["is_error"] is False and critic_result["is_error"] is False
    assert "_awaits" not in str(fake_anthropic.requests[-1].body)  # Sagan's bookkeeping never reaches the API
    # The parent's second call came after both children's last calls.
    order = [system_text(r.body) for r in fake_anthropic.requests]
    prompts = {name: loader.get(name).prompt for name in (ORCHESTRATOR, ANALYZER, CRITIC)}
    second_parent_call = [i for i, p in enumerate(order) if p == prompts[ORCHESTRATOR]][1]
    assert second_parent_call > max(order.index(prompts[ANALYZER]), order.index(prompts[CRITIC]))


def test_the_child_started_first_may_end_last(app, fake_anthropic, worker, make_experiment):
    """The second child ends first (its job runs first): the parent still waits for the
    first, then reads both results, each under its own call."""
    number, parent_id = _start_parent(app, make_experiment)
    answer = by_agent({
        ORCHESTRATOR: [SPAWN_BOTH, *HAND_OVER],
        ANALYZER: [reply(text("Interpretation: the prediction held."))],
        CRITIC: [reply(text("Critique: the claims match the numbers."))]})
    fake_anthropic.default = answer
    worker(max_jobs=1)  # the parent's first step: it starts both and parks
    with app.app_context():
        children = _children(parent_id)
        agent_queue = jobs.queue(jobs.AGENTS)
        assert agent_queue.job_ids == [children[ANALYZER].rq_job_id, children[CRITIC].rq_job_id]
        _move_to_front(agent_queue, children[CRITIC].rq_job_id)
    worker(max_jobs=1)  # the critic, started second, ends first
    with app.app_context():
        children = _children(parent_id)
        assert children[CRITIC].status == "completed" and children[ANALYZER].status == "queued"
        parent = _run(parent_id)
        assert parent.status == "waiting" and not _events(parent_id, "woken")
        assert jobs.queue(jobs.AGENTS).job_ids == [children[ANALYZER].rq_job_id]  # nothing woke the parent
    worker()
    with app.app_context():
        assert _run(parent_id).status == "completed"
        assert len(_events(parent_id, "woken")) == 1
    analyzer_result, critic_result = _results_of_the_woken_call(fake_anthropic)
    assert "the prediction held" in analyzer_result["content"]
    assert "the claims match the numbers" in critic_result["content"]


def test_one_child_failing_comes_back_as_an_error_result_beside_the_others(app, fake_anthropic, worker,
                                                                           make_experiment):
    """The critic's run fails (the model refuses): the parent still wakes once both ended, reads
    the analyzer's result and the critic's failure, each as its own result, the failure marked
    is_error; a sub-agent's failure starts no recovery run of its own."""
    number, parent_id = _start_parent(app, make_experiment)
    fake_anthropic.default = by_agent({
        ORCHESTRATOR: [SPAWN_BOTH, *HAND_OVER],
        ANALYZER: [reply(text("Interpretation: the prediction held."))],
        CRITIC: [refusal(explanation="declined for the test")]})
    worker()
    with app.app_context():
        children = _children(parent_id)
        assert children[CRITIC].status == "failed" and children[CRITIC].failure_reason == "model_refusal"
        assert children[ANALYZER].status == "completed"
        assert _run(parent_id).status == "completed"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 3  # no recovery run
    analyzer_result, critic_result = _results_of_the_woken_call(fake_anthropic)
    assert analyzer_result["is_error"] is False and "the prediction held" in analyzer_result["content"]
    assert critic_result["is_error"] is True
    assert "ended failed: model_refusal" in critic_result["content"] and "declined for the test" in critic_result["content"]


def test_cancelling_the_parent_while_its_children_run_stops_them_all(app, fake_anthropic, worker, make_experiment):
    """The owner cancels the parent while the first child is mid-call: that child ends
    cancelled (not completed on top of the cancel), the second never calls the model, the
    parent is never woken, and the experiment is blocked with the cancel's note."""
    number, parent_id = _start_parent(app, make_experiment)

    def cancel_the_parent(body):
        with app.app_context():
            runs.cancel_run(_run(parent_id), Actor("owner", "o", "Owner"))
            db.session.commit()
        return reply(text("Interpretation: the prediction held."))
    answer = by_agent({ORCHESTRATOR: [SPAWN_BOTH, *HAND_OVER], ANALYZER: [cancel_the_parent],
                       CRITIC: [reply(text("never asked"))]})
    fake_anthropic.default = answer
    worker()
    with app.app_context():
        children = _children(parent_id)
        assert {a: c.status for a, c in children.items()} == {ANALYZER: "cancelled", CRITIC: "cancelled"}
        assert all(c.failure_reason == "cancelled_by_owner" for c in children.values())
        assert not _events(children[ANALYZER].id, "completed")
        parent = _run(parent_id)
        assert parent.status == "cancelled" and not _events(parent_id, "woken")
        assert experiments.get_experiment(number).status == "blocked"
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
        assert note == "Run cancelled by owner"
    assert len(answer.queues[CRITIC]) == 1 and len(answer.queues[ORCHESTRATOR]) == 2  # never asked
