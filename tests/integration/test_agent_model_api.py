"""The agent loop against a fake that behaves like Claude Sonnet 5.5: thinking
blocks that must come back unchanged, every stop reason, prompt caching and honest cost.
Real PostgreSQL and Redis, jobs run by a real RQ worker, the app's real `anthropic` client
streaming from the loopback fake."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from blueprints.api.runs import run_json
from blueprints.runs import run_cost
from models import AgentRun, RunEvent, WorkflowEvent, db
from services.claude import model_api
from services.core.actors import Actor
from services.workflow import experiments, orchestration
from tests.fakes.anthropic_server import context_exceeded, overloaded, paused, refusal, reply, text, tool_use
from tests.integration.test_agent_runs import PLAN

SONNET = model_api.MODELS["claude-sonnet-5-5"].price


def _start_planner(app, number, mode="plan"):
    with app.app_context():
        return orchestration.start_planner(experiments.get_experiment(number).id, Actor("owner"), {}, mode=mode).id


def _run(run_id):
    db.session.expire_all()
    return db.session.get(AgentRun, run_id)


def _events(run_id, kind=None):
    query = sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)
    if kind:
        query = query.where(RunEvent.event_type == kind)
    return list(db.session.scalars(query))


def _blocker_note():
    return db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))


def _expected_cost(responses) -> float:
    total = 0.0
    for response in responses:
        usage = response["usage"]
        total += (usage["input_tokens"] * SONNET.input + usage["output_tokens"] * SONNET.output
                  + usage["cache_creation_input_tokens"] * SONNET.cache_write
                  + usage["cache_read_input_tokens"] * SONNET.cache_read) / 1_000_000
    return total


def test_planner_over_several_calls_with_thinking_reaches_plan_pending(app, client, owner, fake_anthropic,
                                                                     worker, make_experiment):
    """Three model calls, each reply carrying a signed thinking block, reach plan_pending; the
    narration shows on the run page; later calls are billed mostly as cache reads; the cost is
    the published price of exactly the usage the API reported."""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    fake_anthropic.script(
        reply(text("Reading the experiment first."), tool_use("get_experiment", {})),
        reply(tool_use("list_events", {}), thinking="The record is clear; checking the timeline."),
        reply(text("Submitting the plan."), tool_use("submit_plan", {"markdown": PLAN})),
        reply(text("Plan submitted.")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "awaiting_approval" and run.turns == 4
        assert experiments.get_experiment(number).status == "plan_pending"
        # Every assistant turn came back exactly as sent, thinking block first.
        for call, (request, previous) in enumerate(zip(fake_anthropic.requests[1:], fake_anthropic.responses)):
            sent_back = request.body["messages"][2 * call + 1]
            assert sent_back == {"role": "assistant", "content": previous["content"]}
            assert sent_back["content"][0]["type"] == "thinking" and sent_back["content"][0]["signature"]
        narration = [e.body for e in _events(run_id, "assistant_text") if (e.metadata_ or {}).get("thinking")]
        assert narration == ["Reading the experiment first.", "The record is clear; checking the timeline.",
                             "Submitting the plan."]
        # Caching: the second and third calls read the shared prefix from the cache.
        for later in fake_anthropic.responses[1:]:
            usage = later["usage"]
            assert usage["cache_read_input_tokens"] > 0.7 * (usage["input_tokens"] + usage["cache_read_input_tokens"]
                                                             + usage["cache_creation_input_tokens"])
        responses = fake_anthropic.responses
        assert run.cache_read_input_tokens == sum(r["usage"]["cache_read_input_tokens"] for r in responses)
        assert run.cache_creation_input_tokens == sum(r["usage"]["cache_creation_input_tokens"] for r in responses)
        # cost_usd is stored to six decimals after every call, so each call may round by half a micro-dollar
        assert run.cost_usd == pytest.approx(_expected_cost(responses), abs=1e-6 * len(responses))
    page = client.get(f"/runs/{run_id}").text
    assert "narration" in page and "The record is clear; checking the timeline." in page
    assert f"{run.cache_read_input_tokens:,} cache reads" in page and run_cost(run.cost_usd) in page
    assert run_cost(run.cost_usd) != "$0.00"


def test_a_cut_off_plan_is_asked_again_with_a_higher_limit_and_lands(app, fake_anthropic, worker, make_experiment):
    """A reply needing more than 32K output tokens is cut off; the loop asks again with 64K
    (streamed) and the plan lands."""
    number = make_experiment("Long plan", status="planning", pod_account="personal")
    long_plan = reply(tool_use("submit_plan", {"markdown": PLAN}), output_tokens=50_000)
    fake_anthropic.script(long_plan, long_plan, reply(text("Plan submitted.")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        assert _run(run_id).status == "awaiting_approval"
        assert experiments.get_experiment(number).status == "plan_pending"
        notices = [e.body for e in _events(run_id, "notice")]
        assert notices == ["The reply was cut off at 32,000 output tokens; asking again with a limit of 64,000."]
    assert [r.body["max_tokens"] for r in fake_anthropic.requests] == [32_000, 64_000, 32_000]
    assert fake_anthropic.responses[0]["stop_reason"] == "max_tokens"
    # The cut-off reply was dropped, not sent back as a prefill.
    assert len(fake_anthropic.requests[1].body["messages"]) == 1


def test_a_reply_that_never_fits_fails_as_output_limit_for_the_owner(app, fake_anthropic, worker, make_experiment):
    """Cut off at 32K, 64K and the model's 128K maximum: the run fails output_limit, the
    experiment is blocked (the owner's turn) with that reason, and nothing retries it."""
    number = make_experiment("Endless plan", status="planning")
    fake_anthropic.default = reply(tool_use("submit_plan", {"markdown": PLAN}), output_tokens=200_000)
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "output_limit"
        assert "cut off at 128,000 output tokens" in run.last_error
        assert experiments.get_experiment(number).status == "blocked"
        assert "output_limit" in _blocker_note()
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 1  # no automatic recovery
    assert [r.body["max_tokens"] for r in fake_anthropic.requests] == [32_000, 64_000, 128_000]


def test_a_refusal_fails_as_model_refusal_without_recovery(app, fake_anthropic, worker, make_experiment):
    """stop_reason refusal: the run fails model_refusal with the API's explanation, the
    experiment is blocked for the owner, and no recovery repeats it."""
    number = make_experiment("Touchy", status="planning")
    fake_anthropic.script(refusal("I can't help", category="cyber", explanation="Declined by the safety filter."))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "model_refusal"
        assert "category cyber; Declined by the safety filter." in run.last_error
        assert experiments.get_experiment(number).status == "blocked"
        assert "model_refusal" in _blocker_note()
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 1


def test_pause_turn_sends_the_turn_back_to_continue(app, fake_anthropic, worker, make_experiment):
    """pause_turn: the paused assistant turn goes back unchanged as the last message (not a
    prefill), the server continues, and the plan lands."""
    number = make_experiment("Searching", status="planning", pod_account="personal")
    fake_anthropic.script(paused("seed sweep baselines", narration="Searching for baselines."),
                          reply(tool_use("submit_plan", {"markdown": PLAN})), reply(text("Done.")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        assert _run(run_id).status == "awaiting_approval", _run(run_id).last_error
        calls = [e.metadata_ for e in _events(run_id, "tool_call")]
        assert calls[0]["tool"] == "web_search" and calls[0]["server_tool"] is True
    continued = fake_anthropic.requests[1].body["messages"]
    assert continued[-1] == {"role": "assistant", "content": fake_anthropic.responses[0]["content"]}


def test_context_overflow_trims_old_tool_results_then_fails_as_context_limit(app, fake_anthropic, worker,
                                                                            make_experiment):
    """A prompt past the context window is trimmed (old results become stubs) and asked again;
    when nothing is left to trim the run fails context_limit."""
    number = make_experiment("Big reads", status="planning", pod_account="personal")
    fake_anthropic.script(reply(tool_use("list_events", {})), reply(tool_use("get_plan", {})),
                          reply(tool_use("submit_plan", {"markdown": PLAN})), reply(text("Done.")))
    app.config["AGENT_TOOL_RESULT_BUDGET_CHARS"] = 40
    try:
        run_id = _start_planner(app, number)
        worker()
    finally:
        app.config["AGENT_TOOL_RESULT_BUDGET_CHARS"] = 400_000
    with app.app_context():
        assert _run(run_id).status == "awaiting_approval"
        stubs = [b["content"] for m in _run(run_id).conversation if m["role"] == "user" and isinstance(m["content"], list)
                 for b in m["content"] if b.get("type") == "tool_result" and b["content"].startswith("(output of")]
        assert stubs and stubs[0].startswith("(output of list_events") and "dropped from context" in stubs[0]
        assert _events(run_id, "notice")
    assert all("_trimmed" not in str(r.body) for r in fake_anthropic.requests)

    # Nothing left to trim: the brief alone is past the window.
    other = make_experiment("Too big", status="planning")
    fake_anthropic.context_window = 100
    run_id = _start_planner(app, other)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "context_limit"
        assert "prompt is too long" in run.last_error


def test_model_context_window_exceeded_stop_reason_fails_clearly(app, fake_anthropic, worker, make_experiment):
    """stop_reason model_context_window_exceeded with nothing to trim: context_limit, not a finish."""
    number = make_experiment("Full", status="planning")
    fake_anthropic.script(context_exceeded(text("and then")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "failed" and run.failure_reason == "context_limit"


def test_overloaded_and_rate_limited_answers_are_retried(app, fake_anthropic, worker, make_experiment):
    """529 overloaded and 429 with retry-after are retried by the client; the run goes on."""
    from tests.fakes.anthropic_server import error
    number = make_experiment("Busy API", status="clarifying")
    fake_anthropic.script(overloaded(), error(429, "rate_limit_error", "slow down", retry_after=0),
                          reply(tool_use("ask_questions", {"questions": [{"key": "k", "text": "Which?"}]})))
    run_id = _start_planner(app, number, "clarify")
    worker()
    with app.app_context():
        assert _run(run_id).status == "completed"
        assert experiments.get_experiment(number).status == "awaiting_clarifications"
    assert len(fake_anthropic.requests) == 3


def test_unpriced_model_shows_price_unknown_everywhere(app, client, owner, fake_anthropic, worker, make_experiment):
    """A model without a price records tokens and shows "price unknown" (page, list, API), never $0.00."""
    number = make_experiment("Mystery model", status="clarifying")
    app.config["SAGAN_AGENT_MODEL"] = "claude-unpriced-9"
    try:
        fake_anthropic.script(reply(tool_use("ask_questions", {"questions": [{"key": "k", "text": "Which?"}]})))
        run_id = _start_planner(app, number, "clarify")
        worker()
    finally:
        app.config["SAGAN_AGENT_MODEL"] = ""
    with app.app_context():
        run = _run(run_id)
        assert run.model == "claude-unpriced-9" and run.cost_usd is None and run.output_tokens > 0
        result = _events(run_id, "sdk_result")[0].metadata_
        assert result["price_unknown"] is True and result["cost_usd"] is None
        listed = run_json(run)
        assert listed["costUsd"] is None and listed["priceUnknown"] is True
    assert "price unknown" in client.get(f"/runs/{run_id}").text
    assert "price unknown" in client.get("/runs").text and "$0.00" not in client.get("/runs").text


def test_price_overrides_set_all_four_rates(app):
    """SAGAN_MODEL_PRICES replaces a model's four rates; the cost uses each one."""
    class Usage:
        input_tokens, output_tokens = 1_000_000, 1_000_000
        cache_creation_input_tokens, cache_read_input_tokens = 1_000_000, 1_000_000
    with app.app_context():
        assert model_api.cost("claude-sonnet-5-5", Usage) == pytest.approx(
            SONNET.input + SONNET.output + SONNET.cache_write + SONNET.cache_read)
        app.config["SAGAN_MODEL_PRICES"] = {"claude-sonnet-5-5": [1, 2, 3, 4],
                                            "my-model": {"input": 1, "output": 1, "cache_write": 1, "cache_read": 0}}
        try:
            assert model_api.cost("claude-sonnet-5-5", Usage) == pytest.approx(10)
            assert model_api.cost("my-model", Usage) == pytest.approx(3)
            assert model_api.cost("nobody", Usage) is None
        finally:
            app.config["SAGAN_MODEL_PRICES"] = {}


@pytest.mark.parametrize("bad", [{"m": [2, 10]}, {"m": [2, 10, "x", 1]}, {"m": {"input": 1}}, {"m": [-1, 1, 1, 1]},
                                 ["not", "an", "object"]])
def test_malformed_price_overrides_stop_start_up(bad):
    """A malformed SAGAN_MODEL_PRICES is a clear error at start-up, not a silent $0."""
    import config as sagan_config
    from app import create_app

    class BadPrices(sagan_config.TestConfig):
        SAGAN_MODEL_PRICES = bad
    with pytest.raises(ValueError, match="SAGAN_MODEL_PRICES"):
        create_app(BadPrices)


def test_a_model_without_adaptive_thinking_is_sent_what_it_accepts(app, fake_anthropic, worker, make_experiment):
    """A planner on Claude Haiku 4.5 (SAGAN_AGENT_MODEL), which has no adaptive thinking and no
    effort parameter: the loop sends neither (the fake answers both with the real 400), so the
    run works; its narration is a text block; its cost is the API's bill at Haiku's prices."""
    number = make_experiment("Cheap model", status="clarifying")
    app.config["SAGAN_AGENT_MODEL"] = "claude-haiku-4-5"
    try:
        fake_anthropic.script(reply(text("Two questions first."), tool_use("ask_questions", {
            "questions": [{"key": "k", "text": "Which base model?"}]})))
        run_id = _start_planner(app, number, "clarify")
        worker()
    finally:
        app.config["SAGAN_AGENT_MODEL"] = ""
    sent = fake_anthropic.requests[0].body
    assert sent["model"] == "claude-haiku-4-5" and "thinking" not in sent and "output_config" not in sent
    assert sent["max_tokens"] <= model_api.MODELS["claude-haiku-4-5"].max_output
    with app.app_context():
        run = _run(run_id)
        assert run.status == "completed" and experiments.get_experiment(number).status == "awaiting_clarifications"
        assert float(run.cost_usd) == pytest.approx(fake_anthropic.billed_usd())
        narration = _events(run_id, "assistant_text")
        assert [e.body for e in narration] == ["Two questions first."] and not narration[0].metadata_
