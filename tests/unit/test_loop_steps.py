"""The agent loop's turn decisions that need no database (services.agents.loop): which stops
fail a run, with what reason and message, and what a finished run answers."""
from __future__ import annotations

from types import SimpleNamespace

from services.agents import loop


def reply(stop_reason: str | None, details=None) -> SimpleNamespace:
    return SimpleNamespace(stop_reason=stop_reason, stop_details=details)


def test_a_refusal_fails_the_run_with_the_models_category_and_explanation():
    """Is a refusal a model_refusal naming the category and explanation, and saying it is not retried?"""
    reason, message = loop.stop_failure("fail_refusal", reply("refusal", SimpleNamespace(
        category="cyber", explanation="asked for an exploit")))
    assert reason == "model_refusal"
    assert message == ("The model declined to continue this run (category cyber; asked for an exploit). Sagan does "
                       "not retry a refusal: rephrase the request or the experiment, then start the step again.")
    assert "(no explanation given)" in loop.stop_failure("fail_refusal", reply("refusal"))[1]


def test_an_unknown_stop_reason_fails_the_run_naming_it():
    """Is a stop reason Sagan does not know a model_api_error quoting it, never a finish?"""
    assert loop.stop_failure("fail_unknown", reply("brand_new_reason")) == (
        "model_api_error", "The model stopped for an unknown reason 'brand_new_reason'; nothing was assumed finished.")
    assert loop.stop_failure("fail_unknown", reply(None))[1].startswith("The model stopped for an unknown reason None;")


def test_other_actions_do_not_fail_the_run():
    """Do finishing, tool use and a paused turn leave the run going (no failure)?"""
    for action in ("finish", "run_tools", "continue_turn"):
        assert loop.stop_failure(action, reply("end_turn")) is None


def test_the_final_text_joins_the_text_blocks_only():
    """Is the answer the text blocks joined by newlines and trimmed, without thinking or tool calls?"""
    blocks = [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "  First."},
              {"type": "tool_use", "id": "t1", "name": "get_plan", "input": {}}, {"type": "text", "text": "Second.\n"}]
    assert loop.final_text(blocks) == "First.\nSecond."
    assert loop.final_text([{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]) == ""
