"""The loop's model-call rules, each on its own: the stop-reason table, the request it sends,
the output-limit ladder, trimming old tool results and repairing a conversation to resume."""
from __future__ import annotations

import pytest
from flask import Flask

from services.claude import model_api


@pytest.fixture
def app_ctx():
    app = Flask(__name__)
    app.config["SAGAN_MODEL_PRICES"] = {}
    with app.app_context():
        yield app


@pytest.mark.parametrize("reason, action", [
    ("tool_use", "run_tools"), ("end_turn", "finish"), ("stop_sequence", "finish"),
    ("max_tokens", "raise_output_limit"), ("pause_turn", "continue_turn"), ("refusal", "fail_refusal"),
    ("model_context_window_exceeded", "trim_context"), ("something_new", "fail_unknown"), (None, "fail_unknown"),
])
def test_every_stop_reason_has_one_action(reason, action):
    """Does each documented stop reason map to its handling, and an unknown one never to a finish?"""
    assert model_api.stop_action(reason) == action


def test_the_request_sends_no_refused_settings_and_marks_three_breakpoints(app_ctx):
    """Adaptive thinking with summarized display, the agent's effort, cache marks on tools,
    system and the latest user turn; no sampling, forced tool choice or budget; the stored
    conversation is not modified."""
    messages = [{"role": "user", "content": "Brief"}, {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]
    params = model_api.request(model="claude-sonnet-5-5", system="Prompt", tools=[{"name": "a"}, {"name": "b"}],
                               messages=messages, effort="high", max_tokens=32_000)
    assert params["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert params["output_config"] == {"effort": "high"}
    assert not {"temperature", "top_p", "top_k", "tool_choice"} & set(params)
    assert "cache_control" in params["tools"][-1] and "cache_control" not in params["tools"][0]
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert params["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in str(messages)


def test_output_limit_ladder_stops_at_the_models_maximum(app_ctx):
    """32K → 64K → 128K (Sonnet 5.5's maximum output) → none."""
    assert model_api.first_max_tokens("claude-sonnet-5-5") == 32_000
    assert model_api.next_max_tokens(32_000, "claude-sonnet-5-5") == 64_000
    assert model_api.next_max_tokens(64_000, "claude-sonnet-5-5") == 128_000
    assert model_api.next_max_tokens(128_000, "claude-sonnet-5-5") is None


def test_old_tool_results_past_the_budget_become_stubs():
    """The oldest results go first, down to half the budget; the newest is always kept."""
    conversation = [{"role": "user", "content": "Brief"}]
    for i in range(4):
        conversation += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "read_file",
                                                            "input": {"path": f"src/x{i}.py"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                       "content": "x" * 49_152}]}]
    assert model_api.trim_tool_results(conversation, 1_000_000) == 0
    assert model_api.trim_tool_results(conversation, 150_000) == 3
    first = conversation[2]["content"][0]
    assert first["content"] == "(output of read_file src/x0.py, 48 KB, dropped from context; call the tool again " \
                               "if needed)"
    assert conversation[-1]["content"][0]["content"] == "x" * 49_152
    assert "_trimmed" not in str(model_api.api_messages(conversation))
    assert model_api.trim_tool_results(conversation, 150_000) == 0  # already within the budget


def test_a_crashed_conversation_is_made_valid_to_resume():
    """Tool calls left without results get error results; assistant turns stay as they were."""
    turn = {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": "sig"},
                                             {"type": "tool_use", "id": "t1", "name": "run_command", "input": {}}]}
    repaired = model_api.resumable([{"role": "user", "content": "Brief"}, turn], note="The worker stopped.")
    assert repaired[1] == turn
    assert repaired[2]["content"][0]["tool_use_id"] == "t1" and repaired[2]["content"][0]["is_error"] is True
    assert repaired[2]["content"][1] == {"type": "text", "text": "The worker stopped."}
    parked = [{"role": "user", "content": "Brief"}]
    assert model_api.resumable(parked, note="Woken.")[0]["content"] == [
        {"type": "text", "text": "Brief"}, {"type": "text", "text": "Woken."}]


def test_the_request_follows_the_models_row(app_ctx):
    """Adaptive thinking and effort where the model has them; neither for Haiku 4.5; a model
    the catalogue lacks is sent what current models take."""
    def sent(model, effort="high"):
        return model_api.request(model=model, system="P", tools=[], messages=[{"role": "user", "content": "B"}],
                                 effort=effort, max_tokens=1000)
    haiku = sent("claude-haiku-4-5")
    assert "thinking" not in haiku and "output_config" not in haiku
    assert sent("claude-sonnet-5")["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert sent("claude-unreleased-9", "max")["output_config"] == {"effort": "max"}
    assert model_api.first_max_tokens("claude-haiku-4-5") == 32_000
    assert model_api.next_max_tokens(32_000, "claude-haiku-4-5") == 64_000
    assert model_api.next_max_tokens(64_000, "claude-haiku-4-5") is None
