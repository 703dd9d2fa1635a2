"""What the agent loop sends to the Messages API and how it reads the answer (docs/agent-loop.md).

Kept apart from the loop so each rule is one small function: the request (adaptive thinking
with a display that returns narration and the agent's effort, where the model has them;
cache breakpoints), the output limit ladder, old tool results trimmed past a budget, the
stop-reason table, and prices (from services.claude.model_catalog).

Nothing here sends settings the models refuse (Sonnet 5.5 migration guide and "Troubleshooting
thinking", re-read 2026-12-02): no forced tool_choice, no temperature/top_p/top_k, no
thinking budget or `disabled`, no assistant prefill, no adaptive thinking or effort to a
model that lacks them.
"""
from __future__ import annotations

import copy
import json
from dataclasses import replace

from flask import current_app

from services.claude import model_catalog

# --- models --------------------------------------------------------------------------------

# One table of models (services.claude.model_catalog, with the published pages it was read
# from): the loop and the tests' fake API both read it. SAGAN_MODEL_PRICES overrides a
# model's four rates (or prices a model the table lacks) without a release.
Price = model_catalog.Price
MODELS = model_catalog.MODELS
PRICE_FIELDS = ("input", "output", "cache_write", "cache_read")

# The output limit ladder: a reply cut off by max_tokens is asked again with the next limit,
# up to the model's maximum output; past that the run fails as output_limit. The SDK refuses
# a non-streaming request above ~21K max_tokens, so every call streams.
FIRST_MAX_TOKENS = 32_000
# The display that returns the thinking text: on Sonnet 5.5 that is where the narration
# written between tool calls comes back (the default, omitted, returns it empty).
DISPLAY = "summarized"
EFFORTS = model_catalog.EFFORTS
CACHE = {"type": "ephemeral"}


def spec(model: str) -> model_catalog.Model:
    """The model's row of the catalogue, with the owner's price override if any."""
    base = model_catalog.get(model)
    configured = (current_app.config.get("SAGAN_MODEL_PRICES") or {}).get(model)
    if configured is not None:
        return replace(base, price=parse_price(model, configured))
    return base


def parse_price(model: str, value) -> Price:
    """A SAGAN_MODEL_PRICES entry: [input, output, cache_write, cache_read] or an object with
    those four keys, USD per million tokens."""
    if isinstance(value, dict) and set(value) == set(PRICE_FIELDS):
        value = [value[name] for name in PRICE_FIELDS]
    if (isinstance(value, list) and len(value) == 4
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value)):
        return Price(*(float(v) for v in value))
    raise ValueError(f"SAGAN_MODEL_PRICES[{model!r}] must be [input, output, cache_write, cache_read] "
                     f"(USD per million tokens, each >= 0) or an object with keys {', '.join(PRICE_FIELDS)}; "
                     f"got {json.dumps(value)}.")


def validate_price_overrides(raw: dict) -> dict:
    """Check every override at start-up, so a typo fails loudly instead of pricing at $0."""
    if not isinstance(raw, dict):
        raise ValueError("SAGAN_MODEL_PRICES must be a JSON object of model → prices.")
    for model, value in raw.items():
        parse_price(model, value)
    return raw


def model_price(model: str) -> Price | None:
    return spec(model or "").price


def cost(model: str, usage) -> float | None:
    """USD for one call's usage, its web searches included; None when the model has no price
    (shown as "price unknown")."""
    price = model_price(model)
    if price is None:
        return None
    return model_catalog.usd(price, input_tokens=usage_count(usage, "input_tokens"),
                             output_tokens=usage_count(usage, "output_tokens"),
                             cache_write_tokens=usage_count(usage, "cache_creation_input_tokens"),
                             cache_read_tokens=usage_count(usage, "cache_read_input_tokens"),
                             web_searches=model_catalog.searches_of(usage))


def usage_count(usage, name: str) -> int:
    return int(getattr(usage, name, None) or 0)


# --- the request ---------------------------------------------------------------------------

def request(*, model: str, system: str, tools: list[dict], messages: list, effort: str, max_tokens: int) -> dict:
    """Keyword arguments for `client.messages.stream`, as the model accepts them.

    Three cache breakpoints: the tool definitions, the system prompt and the last block of
    the latest user turn, so each call reads the previous call's prefix from the cache and
    writes only what is new. The stored conversation never carries cache_control.

    Thinking and effort follow the model's row (services.claude.model_catalog): adaptive
    thinking with the display that returns the narration where the model has it; none on a
    model whose only thinking is a fixed budget (Haiku 4.5 refuses `adaptive` with a 400,
    and a budget would take its share of every reply's output limit); the agent's effort
    where the model has an effort parameter, else none.
    """
    cached_tools = copy.deepcopy(tools)
    if cached_tools:
        cached_tools[-1]["cache_control"] = CACHE
    params = {
        "model": model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": system, "cache_control": CACHE}],
        "tools": cached_tools,
        "messages": with_conversation_breakpoint(messages),
    }
    row = spec(model)
    if row.adaptive:
        params["thinking"] = {"type": "adaptive", "display": DISPLAY}
    sent_effort = model_catalog.effort_for(row, effort)
    if sent_effort is not None:
        params["output_config"] = {"effort": sent_effort}
    return params


def with_conversation_breakpoint(messages: list) -> list:
    marked = copy.deepcopy(messages)
    for message in reversed(marked):
        if message["role"] != "user":
            continue  # a paused turn sent back for continuation: mark the user turn before it
        if isinstance(message["content"], str):
            message["content"] = [{"type": "text", "text": message["content"]}]
        if message["content"]:
            message["content"][-1]["cache_control"] = CACHE
        break
    return marked


def next_max_tokens(current: int, model: str) -> int | None:
    """The next rung of the output limit ladder, or None at the model's maximum."""
    ceiling = spec(model).max_output
    if current >= ceiling:
        return None
    return min(ceiling, current * 2)


def first_max_tokens(model: str) -> int:
    return min(FIRST_MAX_TOKENS, spec(model).max_output)


# --- the answer ------------------------------------------------------------------------------

# One table for every stop reason the API documents (Handling stop reasons, 2026-12-01).
STOP_ACTIONS = {
    "tool_use": "run_tools",
    "end_turn": "finish",
    "stop_sequence": "finish",
    "max_tokens": "raise_output_limit",
    "pause_turn": "continue_turn",
    "refusal": "fail_refusal",
    "model_context_window_exceeded": "trim_context",
}


def stop_action(stop_reason: str | None) -> str:
    """What the loop does next for a reply's stop reason; an unknown reason fails the run
    clearly instead of passing for a finish."""
    return STOP_ACTIONS.get(stop_reason or "", "fail_unknown")


def stored_blocks(content) -> list[dict]:
    """The assistant turn exactly as the API returned it (every block type, thinking with its
    signature), as JSON for the conversation column; the API gets these back unchanged."""
    return [block.to_dict(exclude_none=True) for block in content]


def narration(blocks: list[dict]) -> list[str]:
    """Text a person reads on the run page: summarized thinking and text blocks, in order."""
    out = []
    for block in blocks:
        if block["type"] == "thinking" and (block.get("thinking") or "").strip():
            out.append(block["thinking"])
    return out


def is_context_overflow(exc) -> bool:
    body = getattr(exc, "body", None)
    message = str((body or {}).get("error", {}).get("message", "")) if isinstance(body, dict) else str(exc)
    return getattr(exc, "status_code", None) == 400 and "prompt is too long" in message


def refusal_detail(response) -> str:
    details = getattr(response, "stop_details", None)
    category = getattr(details, "category", None)
    explanation = getattr(details, "explanation", None)
    parts = [f"category {category}" if category else "", explanation or ""]
    return "; ".join(p for p in parts if p) or "no explanation given"


# --- trimming old tool results -----------------------------------------------------------------

def trim_tool_results(conversation: list, budget_chars: int) -> int:
    """Replace the oldest tool results with a short stub once all results pass the budget.

    Trims down to half the budget at once so it happens rarely (each trim changes the prefix
    and costs one cache write). Returns how many results were dropped; edits in place.
    """
    results = [(m, b) for m in conversation if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result" and not b.get("_trimmed")]
    total = sum(_size(b) for _, b in results)
    if total <= budget_chars:
        return 0
    calls = {b["id"]: b for m in conversation if m["role"] == "assistant" and isinstance(m["content"], list)
             for b in m["content"] if b.get("type") == "tool_use"}
    dropped = 0
    for _, block in results[:-1]:  # never the newest result: the model has not read it yet
        if total <= budget_chars // 2:
            break
        size = _size(block)
        call = calls.get(block.get("tool_use_id"), {})
        block["content"] = stub(call.get("name", "a tool"), call.get("input") or {}, size)
        block["_trimmed"] = True
        total -= size - len(block["content"])
        dropped += 1
    return dropped


def stub(name: str, data: dict, size: int) -> str:
    target = next((str(v) for v in data.values() if isinstance(v, str) and v), "")
    what = f"{name} {target[:120]}".strip()
    return f"(output of {what}, {max(1, round(size / 1024))} KB, dropped from context; call the tool again if needed)"


def _size(block: dict) -> int:
    content = block.get("content")
    return len(content) if isinstance(content, str) else len(json.dumps(content))


def api_messages(conversation: list) -> list:
    """The stored conversation without Sagan's bookkeeping keys (`_trimmed`)."""
    clean = []
    for message in conversation:
        content = message["content"]
        if isinstance(content, list):
            content = [{k: v for k, v in b.items() if not k.startswith("_")} for b in content]
        clean.append({"role": message["role"], "content": content})
    return clean


def resumable(conversation: list, note: str | None = None) -> list:
    """The conversation made valid to send again after a crash or restart.

    A worker that died while tools ran leaves an assistant turn whose tool calls have no
    results; the API refuses that (and a conversation ending on an assistant turn is a
    prefill). Each unanswered call gets an error result saying the outcome was lost, and
    `note` (if any) follows as text in that user turn. Assistant turns stay unchanged.
    """
    repaired = copy.deepcopy(conversation or [])
    last = repaired[-1] if repaired else None
    if last is not None and last["role"] == "assistant" and isinstance(last["content"], list):
        lost = [b["id"] for b in last["content"] if b.get("type") == "tool_use"]
        if lost:
            repaired.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tool_id, "is_error": True,
                 "content": "The worker stopped while this tool ran; its result was lost. Check the current "
                            "state (it may or may not have taken effect) before calling it again."}
                for tool_id in lost]})
    if note:
        last = repaired[-1] if repaired else None
        if last is not None and last["role"] == "user":
            if isinstance(last["content"], str):
                last["content"] = [{"type": "text", "text": last["content"]}]
            last["content"].append({"type": "text", "text": note})
        else:
            repaired.append({"role": "user", "content": [{"type": "text", "text": note}]})
    return repaired
