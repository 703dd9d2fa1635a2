"""The fake Messages API refuses what the real one refuses (Sonnet 5.5 migration guide, read
2026-12-01; "Troubleshooting thinking", the API's getting-started and versions pages and the
model table of services.claude.model_catalog, read 2026-12-02), through the real SDK over
HTTP, so the agent tests cannot pass against a friendlier API than production's."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import anthropic
import pytest

from services.claude import model_catalog
from tests.fakes.anthropic_server import FakeAnthropic, cited, reply, text, tool_use, web_fetch, web_search

MODEL = "claude-sonnet-5-5"
BRIEF = [{"role": "user", "content": "Plan the seed sweep. " * 10}]


@pytest.fixture
def fake():
    with FakeAnthropic() as server:
        yield server


def _client(fake):
    return anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.url, max_retries=0,
                               default_headers={"x-api-key": "sk-ant-test", "Authorization": anthropic.Omit()})


def _first_turn(fake, client):
    fake.script(reply(text("Looking first."), tool_use("get_experiment", {})))
    message = client.messages.create(model=MODEL, max_tokens=1000, messages=BRIEF,
                                     thinking={"type": "adaptive", "display": "summarized"})
    blocks = [b.to_dict(mode="json", exclude_none=True) for b in message.content]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": blocks[-1]["id"], "content": "ok"}]}
    return blocks, result


@pytest.mark.parametrize("setting, message", [
    ({"tool_choice": {"type": "any"}}, "forced tool use"),
    ({"tool_choice": {"type": "tool", "name": "get_experiment"}}, "forced tool use"),
    ({"temperature": 0.2}, "sampling parameters"),
    ({"top_p": 0.9}, "sampling parameters"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking.type.enabled"),
    ({"thinking": {"type": "disabled"}}, "thinking.type.disabled"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"max_tokens": 200_000}, "maximum allowed number of output tokens"),
])
def test_refused_settings_get_the_real_400(fake, setting, message):
    """Each setting the model refuses is a 400 invalid_request_error in the API's error shape."""
    fake.script(reply(text("never")))
    params = {"model": MODEL, "max_tokens": 1000, "messages": BRIEF,
              "tools": [{"name": "get_experiment", "input_schema": {"type": "object"}}]}
    if {"temperature", "top_p"} & set(setting):
        params["extra_body"] = setting  # SDK 2.14 no longer even takes sampling parameters
    else:
        params.update(setting)
    with pytest.raises(anthropic.BadRequestError) as caught:
        with _client(fake).messages.stream(**params) as stream:
            stream.get_final_message()
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert message in caught.value.body["error"]["message"] and caught.value.body["request_id"]
    assert fake.remaining() == 1  # the script was not consumed


def test_thinking_must_come_back_unchanged(fake):
    """Dropping, editing or re-signing the thinking block of a tool-using turn is refused;
    sending it back exactly is accepted."""
    client = _client(fake)
    blocks, result = _first_turn(fake, client)
    assert blocks[0]["type"] == "thinking" and blocks[0]["thinking"] == "Looking first." and blocks[0]["signature"]
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"]  # the narration came back inside thinking
    edited = [{**blocks[0], "thinking": "Something else."}, blocks[1]]
    for content, error in ((blocks[1:], "Expected `thinking`"), (edited, "Invalid `signature`")):
        with pytest.raises(anthropic.BadRequestError, match=error):
            client.messages.create(model=MODEL, max_tokens=1000,
                                   messages=BRIEF + [{"role": "assistant", "content": content}, result])
    fake.script(reply(text("Done.")))
    done = client.messages.create(model=MODEL, max_tokens=1000,
                                  messages=BRIEF + [{"role": "assistant", "content": blocks}, result])
    assert done.stop_reason == "end_turn"


def test_thinking_is_bound_to_the_model_and_the_conversation(fake):
    """The same blocks sent in another conversation, or to another model, are refused."""
    client = _client(fake)
    blocks, result = _first_turn(fake, client)
    other = [{"role": "user", "content": "A different task."}]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        client.messages.create(model=MODEL, max_tokens=1000,
                               messages=other + [{"role": "assistant", "content": blocks}, result])
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        client.messages.create(model="claude-sonnet-5", max_tokens=1000,
                               messages=BRIEF + [{"role": "assistant", "content": blocks}, result])


def test_prefill_and_unanswered_tool_calls_are_refused(fake):
    """A conversation ending on an assistant turn, or tool calls without their results next, is a 400."""
    client = _client(fake)
    blocks, result = _first_turn(fake, client)
    with pytest.raises(anthropic.BadRequestError, match="prefill"):
        client.messages.create(model=MODEL, max_tokens=1000,
                               messages=BRIEF + [{"role": "assistant", "content": [{"type": "text", "text": "Sure:"}]}])
    with pytest.raises(anthropic.BadRequestError, match="without `tool_result`"):
        client.messages.create(model=MODEL, max_tokens=1000, messages=BRIEF + [
            {"role": "assistant", "content": blocks}, {"role": "user", "content": "Go on."}])


def test_omitted_display_is_the_default(fake):
    """Without display summarized the thinking text is empty, the signature present."""
    fake.script(reply(text("Hidden narration."), tool_use("get_experiment", {})))
    message = _client(fake).messages.create(model=MODEL, max_tokens=1000, messages=BRIEF)
    assert message.content[0].type == "thinking" and message.content[0].thinking == ""
    assert message.content[0].signature


def test_cache_usage_follows_the_breakpoints(fake):
    """A marked prefix is written once, then read by the next call that shares it."""
    client = _client(fake)
    system = [{"type": "text", "text": "You are Sagan's planner. " * 200, "cache_control": {"type": "ephemeral"}}]
    fake.script(reply(text("one")), reply(text("two")))
    first = client.messages.create(model=MODEL, max_tokens=1000, system=system, messages=BRIEF)
    second = client.messages.create(model=MODEL, max_tokens=1000, system=system,
                                    messages=[{"role": "user", "content": "Another question."}])
    assert first.usage.cache_creation_input_tokens > 1000 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0


def test_streaming_speaks_the_event_format(fake):
    """The SDK's stream helper assembles thinking, text and tool input from the fake's SSE."""
    fake.script(reply(text("Narration."), tool_use("get_experiment", {"number": 7}), thinking="Plan."))
    with _client(fake).messages.stream(model=MODEL, max_tokens=64_000, messages=BRIEF,
                                       thinking={"type": "adaptive", "display": "summarized"}) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
            "message_delta", "message_stop"} <= set(kinds)
    assert message.content[0].thinking == "Plan.\n\nNarration." and message.content[0].signature
    assert message.content[1].input == {"number": 7} and message.stop_reason == "tool_use"
    assert message.usage.output_tokens > 0


# --- web search and web fetch (server tools) ------------------------------------------------------

SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
FETCH_TOOL = {"type": "web_fetch_20250910", "name": "web_fetch"}


@pytest.mark.parametrize("tool, message", [
    ({**SEARCH_TOOL, "allowed_domains": []}, "Empty list of domains is ambiguous"),
    ({**SEARCH_TOOL, "allowed_domains": ["a.org"], "blocked_domains": ["b.org"]}, "cannot be used together"),
    ({**SEARCH_TOOL, "allowed_domains": ["https://a.org"]}, "without the HTTP/HTTPS scheme"),
    ({**SEARCH_TOOL, "max_uses": 0}, "greater than or equal to 1"),
    ({**SEARCH_TOOL, "citations": {"enabled": True}}, "Extra inputs are not permitted"),
    ({**SEARCH_TOOL, "name": "search"}, "Input should be 'web_search'"),
    ({"type": "web_search_20990101", "name": "web_search"}, "does not match any of the expected tags"),
    ({**FETCH_TOOL, "blocked_domains": []}, "Empty list of domains is ambiguous"),
])
def test_malformed_server_tool_definitions_get_a_400(fake, tool, message):
    """A server tool defined the way the API refuses is a 400 invalid_request_error."""
    fake.script(reply(text("never")))
    with pytest.raises(anthropic.BadRequestError) as caught:
        _client(fake).messages.create(model=MODEL, max_tokens=1000, messages=BRIEF, tools=[tool])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert message in caught.value.body["error"]["message"]


def _search_turn(fake, client, tools):
    fake.script(reply(web_search("seed variance", [("https://arxiv.org/abs/1", "Seeds", "Variance is 1 point.")]),
                      cited("Variance is about a point.", "https://arxiv.org/abs/1", "Variance is 1 point."),
                      tool_use("get_experiment", {})))
    with client.messages.stream(model=MODEL, max_tokens=1000, messages=BRIEF, tools=tools,
                                thinking={"type": "adaptive", "display": "summarized"}) as stream:
        message = stream.get_final_message()
    return message, [b.to_dict(mode="json", exclude_none=True) for b in message.content]


def test_a_search_returns_the_real_blocks_streamed_with_citations_and_usage(fake):
    """server_tool_use, a web_search_tool_result with encrypted_content, a text block with a
    web_search_result_location citation (kept through streaming), and the search counted."""
    client = _client(fake)
    message, blocks = _search_turn(fake, client, [SEARCH_TOOL, {"name": "get_experiment",
                                                                "input_schema": {"type": "object"}}])
    kinds = [b["type"] for b in blocks]
    assert kinds == ["thinking", "server_tool_use", "web_search_tool_result", "text", "tool_use"]
    result = blocks[2]["content"][0]
    assert result["type"] == "web_search_result" and result["encrypted_content"] and result["url"].startswith("https")
    citation = blocks[3]["citations"][0]
    assert citation["type"] == "web_search_result_location" and citation["encrypted_index"]
    assert citation["url"] == "https://arxiv.org/abs/1" and citation["title"] == "Seeds"
    assert message.usage.server_tool_use.web_search_requests == 1


def test_altered_encrypted_content_is_refused(fake):
    """Search results sent back must be byte-for-byte what the API returned."""
    client = _client(fake)
    tools = [SEARCH_TOOL, {"name": "get_experiment", "input_schema": {"type": "object"}}]
    _, blocks = _search_turn(fake, client, tools)
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": blocks[-1]["id"], "content": "ok"}]}
    tampered = [dict(b) for b in blocks]
    tampered[2] = {**tampered[2], "content": [{**tampered[2]["content"][0], "encrypted_content": "Zm9yZ2Vk"}]}
    fake.script(reply(text("never")), reply(text("Fine.")))
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, max_tokens=1000, tools=tools,
                               messages=BRIEF + [{"role": "assistant", "content": tampered}, answer])
    assert "encrypted content was modified" in caught.value.body["error"]["message"]
    fake.turns.clear()
    fake.script(reply(text("Fine.")))
    ok = client.messages.create(model=MODEL, max_tokens=1000, tools=tools,
                                messages=BRIEF + [{"role": "assistant", "content": blocks}, answer])
    assert ok.content[-1].text == "Fine."


def test_fetch_only_urls_seen_before(fake):
    """Web fetch opens a URL from the user's text or earlier results, else the result is the
    url_not_in_prior_context error (inside a 200)."""
    fake.script(reply(web_fetch("https://unseen.example.org/x"), text("Could not open it.")))
    message = _client(fake).messages.create(model=MODEL, max_tokens=1000, messages=BRIEF, tools=[FETCH_TOOL])
    result = next(b for b in message.content if b.type == "web_fetch_tool_result")
    assert result.content.type == "web_fetch_tool_result_error"
    assert result.content.error_code == "url_not_in_prior_context"
    fake.script(reply(web_fetch("https://arxiv.org/abs/1"), text("Read it.")))
    message = _client(fake).messages.create(model=MODEL, max_tokens=1000, tools=[FETCH_TOOL], messages=[
        {"role": "user", "content": "Read https://arxiv.org/abs/1 please. " * 5}])
    result = next(b for b in message.content if b.type == "web_fetch_tool_result")
    assert result.content.type == "web_fetch_result" and result.content.url == "https://arxiv.org/abs/1"
    assert message.usage.server_tool_use.web_fetch_requests == 1


def test_a_script_that_searches_without_the_tool_is_a_loud_error(fake):
    """A test whose script searches when the request offers no web_search fails, never passes quietly."""
    fake.script(reply(web_search("x", []), text("never")))
    with pytest.raises(anthropic.InternalServerError) as caught:
        _client(fake).messages.create(model=MODEL, max_tokens=1000, messages=BRIEF)
    assert "offers no web_search tool" in caught.value.body["error"]["message"]


# --- headers and models ---------------------------------------------------------------------------

def _post(fake, headers: dict) -> tuple[int, dict]:
    """A raw Messages call with exactly these headers (the SDK always adds its own)."""
    body = json.dumps({"model": MODEL, "max_tokens": 100, "messages": BRIEF}).encode()
    request = urllib.request.Request(f"{fake.url}/v1/messages", data=body, method="POST",
                                     headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_key_goes_in_x_api_key_with_an_api_version(fake):
    """No x-api-key (a bare Bearer token included) is a 401; no anthropic-version is a 400;
    both present is answered."""
    fake.script(reply(text("Hello.")))
    status, body = _post(fake, {"anthropic-version": "2023-06-01"})
    assert (status, body["error"]["type"]) == (401, "authentication_error")
    assert body["error"]["message"] == "x-api-key header is required"
    status, _ = _post(fake, {"Authorization": "Bearer sk-ant-test", "anthropic-version": "2023-06-01"})
    assert status == 401
    status, body = _post(fake, {"x-api-key": "sk-ant-test"})
    assert (status, body["error"]["message"]) == (400, "anthropic-version: header is required")
    assert fake.remaining() == 1
    status, body = _post(fake, {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"})
    assert status == 200 and body["content"][-1]["text"] == "Hello."


HAIKU = "claude-haiku-4-5"


@pytest.mark.parametrize("model, setting, message", [
    (HAIKU, {"thinking": {"type": "adaptive"}}, "adaptive thinking is not supported on this model"),
    (HAIKU, {"output_config": {"effort": "high"}}, "does not support the effort parameter"),
    (HAIKU, {"max_tokens": 64_001}, "64000, which is the maximum allowed"),
    (HAIKU, {"thinking": {"type": "enabled", "budget_tokens": 100}}, "greater than or equal to 1024"),
    ("claude-sonnet-5", {"thinking": {"type": "between_tools"}}, "thinking.type.between_tools is not supported"),
    (MODEL, {"thinking": {"type": "between_tools"}, "output_config": {"effort": "max"}},
     "not supported with effort 'max'"),
])
def test_each_model_refuses_what_its_row_says_it_refuses(fake, model, setting, message):
    """The catalogue's row decides: adaptive thinking or an effort on Haiku 4.5, its 64K output,
    between_tools anywhere but Sonnet 5.5 (and there at max effort) are 400s."""
    fake.script(reply(text("never")))
    params = {"model": model, "max_tokens": 1000, "messages": BRIEF, **setting}
    with pytest.raises(anthropic.BadRequestError) as caught:
        with _client(fake).messages.stream(**params) as stream:
            stream.get_final_message()
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert message in caught.value.body["error"]["message"]
    assert fake.remaining() == 1


def test_a_model_that_is_not_thinking_returns_no_thinking_block(fake):
    """Haiku 4.5 with no `thinking` field: no thinking block, and the text before a tool call
    stays a text block (only Sonnet 5.5 folds it into the thinking)."""
    fake.script(reply(text("Looking first."), tool_use("get_experiment", {})))
    message = _client(fake).messages.create(model=HAIKU, max_tokens=1000, messages=BRIEF)
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.content[0].text == "Looking first."
    fake.script(reply(text("Between tools."), tool_use("get_experiment", {})))
    updates = _client(fake).messages.create(model=MODEL, max_tokens=1000, messages=BRIEF,
                                            thinking={"type": "between_tools"})
    # between_tools: no up-front thinking, the update between tool calls still in a thinking block
    assert updates.content[0].type == "thinking" and updates.content[0].thinking == "Between tools."


def test_the_bill_is_the_usage_at_the_catalogues_prices(fake):
    """billed_usd() prices what each answer reported with the one table of prices."""
    fake.script(reply(text("one")), reply(text("two")))
    client = _client(fake)
    first = client.messages.create(model=MODEL, max_tokens=1000, messages=BRIEF)
    second = client.messages.create(model=HAIKU, max_tokens=1000, messages=BRIEF)
    sonnet, haiku = model_catalog.MODELS[MODEL].price, model_catalog.MODELS[HAIKU].price
    expected = sum((m.usage.input_tokens * p.input + m.usage.output_tokens * p.output
                    + m.usage.cache_creation_input_tokens * p.cache_write
                    + m.usage.cache_read_input_tokens * p.cache_read) / 1e6
                   for m, p in ((first, sonnet), (second, haiku)))
    assert fake.billed_usd() == pytest.approx(expected) and expected > 0
