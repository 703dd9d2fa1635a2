"""A loopback fake of the Anthropic Messages API that behaves like the models Sagan uses.

Tests script what "Claude" answers, turn by turn; the app's real `anthropic` client talks to
it over HTTP through ANTHROPIC_BASE_URL. It is faithful by default, including the parts that
are inconvenient for a client (checked against the docs on 2026-12-01 and again on
2026-12-02: the Sonnet 5.5 overview, "What's new" and migration guide, "Troubleshooting
thinking", "Adaptive thinking", "Handling stop reasons", "Prompt caching", "Streaming
messages", the API's "Getting started" and "Versions" pages, and the installed SDK,
anthropic 2.14.0):

- Each model behaves as its row of services.claude.model_catalog says — the one table of
  models, prices and limits that the agent loop reads too, each value with the published
  page it came from. The fake refuses what that row says the model refuses: adaptive
  thinking on Claude Haiku 4.5 (400 "adaptive thinking is not supported on this model"),
  an effort on a model without one, `between_tools` anywhere but Sonnet 5.5 (and there at
  effort xhigh or max), `max_tokens` above the model's maximum output, a prompt over its
  context window. A model the table does not know (the demo's "demo-scripted", a test's
  unpriced model) is served as Sonnet 5.5 rather than with the real API's 404, so those
  names keep working.
- Headers as the API documents them: the key in `x-api-key` (a request without one is a 401
  `authentication_error`, "x-api-key header is required"; a bare `Authorization: Bearer`
  is the OAuth form and is not taken for an API key) and an `anthropic-version` header (a
  400 without it). The installed SDK sends the key as a Bearer token by default, so the
  app's client names the header itself (services.agents.loop.model_client).
- A model that thinks (Sonnet 5 and 5.5 by default, or when the request turns thinking on)
  starts every reply with a `thinking` block carrying a signature; a model that does not
  (Haiku 4.5 with no `thinking` field) returns none. The default display of Sonnet 5 and
  5.5 is `omitted`: the block's text is empty unless the request asks for
  `thinking: {"type": "adaptive", "display": "summarized"}`. On Sonnet 5.5 the text a model
  writes between tool calls comes back *inside* the thinking block, so a scripted text
  block that precedes a tool call is folded into the thinking text (other models keep it
  as a text block). `thinking: {"type": "between_tools"}` (Sonnet 5.5 only) turns the
  up-front thinking off, but those updates still come back as thinking blocks, with their
  text ("What's new in Claude Sonnet 5.5"). Wording of a refusal that the docs do not quote
  (an effort on Haiku 4.5, `between_tools` at max effort) is the fake's.
- Signatures are bound to the model and the conversation (its first user message). An
  assistant turn with tool calls must come back exactly as it was sent, thinking blocks
  first and unchanged, or the request is refused with a 400 `invalid_request_error` in the
  real error shape; so is a thinking block whose text or signature was altered.
- Settings Sonnet 5.5 refuses get a 400: forced `tool_choice` (`any`/`tool`), sampling
  parameters (`temperature`, `top_p`, `top_k`), `thinking` `enabled` (a budget) or
  `disabled`, an unknown effort, `max_tokens` above the model's 128K output, an assistant
  prefill (the conversation must end with a user turn, except to continue a `pause_turn`),
  more than four `cache_control` breakpoints, `cache_control` on a thinking block, and tool
  calls without their results right after them.
- Usage is computed from what was sent (about four characters a token): the prompt prefix up
  to a `cache_control` breakpoint is written to the cache once (at least the model's minimum
  cacheable prompt: 512 tokens on Sonnet 5.5, 1,024 on Sonnet 5, 4,096 on Haiku 4.5) and read back
  on later calls that share it (the API looks back up to 20 blocks from a breakpoint), so a
  second call of a long run is billed mostly as `cache_read_input_tokens`.
- A reply whose output (thinking included) needs more tokens than `max_tokens` is cut off:
  `stop_reason: max_tokens`, tool calls dropped, output_tokens = max_tokens. A prompt longer
  than the context window is a 400 "prompt is too long".
- `stream: true` is answered as server-sent events in the real event order (message_start,
  content_block_start/delta/stop with thinking_delta, signature_delta, text_delta and
  input_json_delta, message_delta with cumulative usage, message_stop, and pings); the SDK
  requires streaming for large `max_tokens`.

Web search and web fetch (server tools; checked 2026-12-01 against platform.claude.com's
"Web search tool", "Web fetch tool" and "Server tools" pages, the SDK's types, and the
400s reported in public issue threads; the beta header question re-checked 2026-12-02: the
docs search holds only the 2025 beta pages, which ask for it, while SDK 2.14's GA tool
union carries `web_fetch_20250910`, so the GA API takes it without one):
- Tool versions: `web_search_20250305`, `web_search_20260209`, `web_search_20260318`,
  `web_fetch_20250910`, `web_fetch_20260209`, `web_fetch_20260309`, `web_fetch_20260318`
  (the newer ones add dynamic filtering through code execution; Sagan uses the basic
  ones). Web fetch no longer needs the `web-fetch-2025-09-10` beta header (the SDK's GA
  tool union holds it). The name must be `web_search` / `web_fetch`.
- A malformed definition is a 400 invalid_request_error: an unknown field ("Extra inputs
  are not permitted"), an empty domain list ("Empty list of domains is ambiguous. Provide
  at least one domain or null." — the real message), `allowed_domains` together with
  `blocked_domains` (the docs: "cannot be used together"), a domain with a scheme (the
  docs: "should not include the HTTP/HTTPS scheme"), `max_uses` below 1. Wording other
  than the quoted one is the fake's.
- What the model gets: `server_tool_use` (id `srvtoolu_…`, input `{query}` or `{url}`),
  then `web_search_tool_result` whose content is a list of `web_search_result` (url,
  title, `encrypted_content`, page_age) or an error object `web_search_tool_result_error`
  with `error_code` (`invalid_tool_input`, `unavailable`, `max_uses_exceeded`,
  `too_many_requests`, `query_too_long`); a fetch gives `web_fetch_tool_result` with a
  `web_fetch_result` (url, retrieved_at, a `document` with the page text and title) or a
  `web_fetch_tool_result_error` (`url_not_allowed`, `url_not_in_prior_context` — the
  model may fetch only URLs from the user's text or earlier results —, `max_uses_exceeded`,
  …). Errors come inside a 200 response, never as an HTTP error.
- Allowed domains filter the results (subdomains included); a search past `max_uses` in
  one request is a `max_uses_exceeded` result.
- Text written from results carries `citations` of type `web_search_result_location`
  (url, title, cited_text, `encrypted_index`); streamed as `citations_delta` events. A
  fetched page is a document: with `citations: {"enabled": true}` on the tool (off by
  default), text from it cites a `char_location` (cited_text, document_title,
  document_index, start/end_char_index). The docs do not say how document_index counts
  fetched pages; the fake counts them within the reply, and Sagan matches by title. The
  fake keeps a cited text block as a text block even before a tool call (citations only
  exist on text blocks; the docs say nothing about folding them into thinking).
- `encrypted_content` and `encrypted_index` are opaque and must come back unchanged:
  an altered or unknown one is a 400 (the fake's wording).
- `usage.server_tool_use.web_search_requests` / `web_fetch_requests` count the searches
  and fetches that ran (failed ones are not billed); searches cost $10 per 1,000.

Each scripted turn is one of:
- `reply(...)` — text and/or tool_use blocks, optional `thinking=` narration, optional
  `output_tokens=` (how long the reply "is": above max_tokens it is cut off);
- inside a reply, `web_search(query, results)`, `web_fetch(url)`, `web_search_failing(code)`
  and `cited(text, url, cited_text)`: expanded from the request (domains, max_uses);
- `refusal(...)`, `paused(...)` (a pause_turn with a server tool call), `context_exceeded(...)`;
- `error(status, type, message, retry_after)`, `overloaded()`;
- `slow(seconds, turn)` — wait before answering;
- a callable `fn(request_json) -> turn`, to answer from what was asked.

Every request is recorded (`fake.requests`) with its headers and JSON body, every answer
(`fake.responses`) with the usage it reported; `fake.billed_usd()` is what that usage costs at
the catalogue's prices, the bill the API would send.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from services.claude import model_catalog

_ids = itertools.count(1)

# The model an unknown model name is served as (see the docstring).
DEFAULT_MODEL = "claude-sonnet-5-5"
CACHE_LOOKBACK_BLOCKS = 20
EFFORTS = model_catalog.EFFORTS
DISPLAYS = ("summarized", "omitted")
THINKING_TYPES = ("adaptive", "enabled", "disabled", "between_tools")
SERVER_TOOL_VERSIONS = {"web_search_20250305", "web_search_20260209", "web_search_20260318",
                        "web_fetch_20250910", "web_fetch_20260209", "web_fetch_20260309", "web_fetch_20260318"}
_COMMON_FIELDS = {"type", "name", "allowed_domains", "blocked_domains", "cache_control", "max_uses", "allowed_callers",
                  "defer_loading", "strict", "response_inclusion"}
SERVER_TOOL_FIELDS = {"web_search": _COMMON_FIELDS | {"user_location"},
                      "web_fetch": _COMMON_FIELDS | {"citations", "max_content_tokens", "use_cache", "url_sources"}}


def system_text(body: dict) -> str:
    """The system prompt of a request, whether sent as a string or as text blocks."""
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict, id: str | None = None) -> dict:
    return {"type": "tool_use", "id": id or f"toolu_fake_{next(_ids):04d}", "name": name, "input": input}


def web_search(query: str, results: list[tuple[str, str, str]]) -> dict:
    """The model searches; `results` are (url, title, page text) the search engine finds.
    Expanded into server_tool_use + web_search_tool_result when answered."""
    return {"type": "_web_search", "query": query, "results": list(results)}


def web_search_failing(error_code: str, query: str = "anything") -> dict:
    """A search whose result block is an error (e.g. too_many_requests, unavailable)."""
    return {"type": "_web_search", "query": query, "results": [], "error_code": error_code}


def web_fetch(url: str) -> dict:
    """The model fetches a page (from earlier search results or the user's text)."""
    return {"type": "_web_fetch", "url": url}


def cited(value: str, url: str, cited_text: str) -> dict:
    """Text written from a search result or a fetched page, citing it (the citation is dropped
    if that result was not found or the page not fetched with citations on)."""
    return {"type": "text", "text": value, "_cite": [(url, cited_text)]}


def reply(*blocks: dict, stop_reason: str | None = None, thinking: str | None = None,
          output_tokens: int | None = None, model: str = "claude-fake", **extra) -> dict:
    """A scripted answer. stop_reason defaults to tool_use when a block calls a tool.

    `thinking`: the narration the model writes (shown only with display summarized);
    `output_tokens`: how many tokens the reply takes (default: counted from its blocks).
    """
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"_kind": "reply", "_thinking": thinking, "_output_tokens": output_tokens, "content": list(blocks),
            "stop_reason": stop_reason, "model": model, **extra}


def refusal(partial: str = "", category: str | None = "cyber",
            explanation: str = "This request was declined by the API's safety filter.") -> dict:
    """The model declines: stop_reason refusal with stop_details, any partial text kept."""
    return reply(*([text(partial)] if partial else []), stop_reason="refusal",
                 stop_details={"type": "refusal", "category": category, "explanation": explanation})


def paused(query: str = "latest results", narration: str | None = None) -> dict:
    """A long server-tool turn paused by the API: stop_reason pause_turn; the client sends the
    assistant turn back unchanged (as the last message) to let it continue."""
    server_id = f"srvtoolu_fake_{next(_ids):04d}"
    return reply({"type": "server_tool_use", "id": server_id, "name": "web_search", "input": {"query": query}},
                 {"type": "web_search_tool_result", "tool_use_id": server_id, "content": [
                     {"type": "web_search_result", "url": "https://example.org/a", "title": "A result",
                      "encrypted_content": "ZmFrZQ==", "page_age": "2 days ago"}]},
                 stop_reason="pause_turn", thinking=narration)


def context_exceeded(*blocks: dict) -> dict:
    """The reply ran into the context window (stop_reason model_context_window_exceeded)."""
    return reply(*blocks, stop_reason="model_context_window_exceeded")


def error(status: int, type: str, message: str, retry_after: float | None = None) -> dict:
    return {"_kind": "error", "status": status, "retry_after": retry_after,
            "body": {"type": "error", "error": {"type": type, "message": message}}}


def overloaded() -> dict:
    """529: the API is temporarily overloaded (the SDK retries it)."""
    return error(529, "overloaded_error", "Overloaded", retry_after=0)


def slow(seconds: float, turn: dict) -> dict:
    return {"_kind": "slow", "seconds": seconds, "turn": turn}


@dataclass
class RecordedRequest:
    path: str
    headers: dict
    body: dict


class Refused(Exception):
    """A request the real API answers with a 400 invalid_request_error."""


class ScriptError(Exception):
    """The test's script asks for something the request makes impossible (answered 500)."""


def tokens(value) -> int:
    """The fake's tokenizer: about four characters a token, never zero for content."""
    raw = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return max(1, len(raw) // 4)


def _without(block, key: str):
    return {k: v for k, v in block.items() if k != key} if isinstance(block, dict) else block


def _normal(block):
    """A block as compared when it comes back: without cache_control and null fields (the
    API treats an omitted optional field and a null one alike)."""
    if isinstance(block, list):
        return [_normal(b) for b in block]
    if not isinstance(block, dict):
        return block
    return {k: _normal(v) for k, v in block.items() if k != "cache_control" and v is not None}


@dataclass
class FakeAnthropic:
    """The server; use as a context manager or call start()/stop()."""

    turns: deque = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    responses: list[dict] = field(default_factory=list)
    default: dict | None = None  # answered when the script runs out (None: a 500 saying so)
    # The model's own limits (model_catalog) unless a test sets a smaller one.
    context_window: int | None = None
    max_output_tokens: int | None = None
    bind: tuple = ("127.0.0.1", 0)
    record: bool = True  # keep every request and response (the demo turns it off)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._server = None
        self._thread = None
        self._secret = b"fake-anthropic-signing-key"
        self._issued: dict[tuple, list] = {}  # (conversation, tool_use id) → the assistant content sent
        self._paused: list[list] = []         # pause_turn contents that may come back as the last turn
        self._cache: set[str] = set()         # prefix hashes written to the prompt cache
        self._encrypted: set[str] = set()     # encrypted_content / encrypted_index values issued

    # --- scripting -------------------------------------------------------------------
    def script(self, *turns) -> "FakeAnthropic":
        with self._lock:
            self.turns.extend(turns)
        return self

    def remaining(self) -> int:
        with self._lock:
            return len(self.turns)

    def billed_usd(self) -> float | None:
        """What the answers so far cost at the catalogue's prices (model_catalog): the bill the
        API would send for the usage it reported, searches included; None once a model has
        no price in the catalogue."""
        total = 0.0
        for message in self.responses:
            usage = message["usage"]
            known = model_catalog.MODELS.get(message["model"])
            if known is None or known.price is None:
                return None
            price = known.price
            total += model_catalog.usd(
                price, input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"],
                cache_write_tokens=usage["cache_creation_input_tokens"],
                cache_read_tokens=usage["cache_read_input_tokens"],
                web_searches=(usage.get("server_tool_use") or {}).get("web_search_requests", 0))
        return total

    def _next_turn(self, body: dict):
        with self._lock:
            turn = self.turns.popleft() if self.turns else self.default
        if callable(turn):
            turn = turn(body)
        return turn

    # --- the API's rules ---------------------------------------------------------------
    def _sign(self, model: str, conversation: str, thinking: str) -> str:
        digest = hmac.new(self._secret, f"{model}\n{conversation}\n{thinking}".encode(), hashlib.sha256).digest()
        return base64.b64encode(b"EqQB" + digest * 3).decode()

    @staticmethod
    def _conversation_key(body: dict) -> str:
        first = (body.get("messages") or [{}])[0].get("content")
        # The same first turn however it is spelled: a string or text blocks, marked or not.
        blocks = [{"type": "text", "text": first}] if isinstance(first, str) else [_normal(b) for b in first or []]
        return hashlib.sha256(json.dumps(blocks, sort_keys=True).encode()).hexdigest()[:16]

    @staticmethod
    def row(model: str | None) -> model_catalog.Model:
        """The catalogue row the fake serves `model` as (Sonnet 5.5 for a name it lacks)."""
        return model_catalog.MODELS.get(model or "") or model_catalog.MODELS[DEFAULT_MODEL]

    def limits(self, model: str | None) -> tuple[int, int]:
        """(context window, maximum output) for `model`, a test's smaller values first."""
        row = self.row(model)
        return (self.context_window or row.context_window, self.max_output_tokens or row.max_output)

    def _validate(self, body: dict) -> None:
        model = body.get("model")
        if not model:
            raise Refused("model: Field required")
        row = self.row(model)
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise Refused("max_tokens: Field required")
        _, max_output = self.limits(model)
        if max_tokens > max_output:
            raise Refused(f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed "
                          f"number of output tokens for {model}")
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                raise Refused(f"{name}: sampling parameters are not supported on {model}; remove `{name}`.")
        effort = (body.get("output_config") or {}).get("effort")
        if effort is not None and effort not in EFFORTS:
            raise Refused(f"output_config.effort: Input should be {', '.join(map(repr, EFFORTS))}")
        if effort is not None and effort not in row.efforts:
            raise Refused(f"output_config.effort: {model} does not support the effort parameter.")
        self._validate_thinking(body.get("thinking"), model, row, effort)
        choice = (body.get("tool_choice") or {}).get("type")
        if choice in ("any", "tool"):
            raise Refused(f"tool_choice: forced tool use (type '{choice}') is not supported on {model}; "
                          "use 'auto' or 'none'.")
        self._validate_cache_control(body)
        self._validate_server_tools(body)
        self._validate_messages(body, model)

    @staticmethod
    def _validate_thinking(thinking, model: str, row: model_catalog.Model, effort: str | None) -> None:
        """What the model's row accepts as `thinking` (Troubleshooting thinking, by model)."""
        if thinking is None:
            return
        kind = thinking.get("type")
        if kind not in THINKING_TYPES:
            raise Refused(f"thinking.type: Input tag '{kind}' found using 'type' does not match any of the "
                          f"expected tags: {', '.join(map(repr, THINKING_TYPES))}")
        if kind not in row.thinking_types:
            if kind == "adaptive":
                raise Refused("adaptive thinking is not supported on this model")  # the real message
            if kind == "enabled" and row.adaptive:
                raise Refused(f"thinking.type.enabled is not supported for {model}. Use thinking.type.adaptive "
                              "and output_config.effort to control thinking behavior.")
            if kind == "disabled" and "between_tools" in row.thinking_types:
                raise Refused(f"thinking.type.disabled is not supported for {model}. Use thinking.type.between_tools "
                              "to turn off up-front thinking.")
            raise Refused(f"thinking.type.{kind} is not supported for {model}.")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024:
                raise Refused("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        elif "budget_tokens" in thinking:
            raise Refused(f"thinking.{kind}.budget_tokens: Extra inputs are not permitted")
        if kind == "between_tools" and effort in model_catalog.EFFORTS_NEEDING_THINKING:
            raise Refused(f"thinking.type.between_tools is not supported with effort {effort!r}; use adaptive "
                          "thinking at xhigh or max.")
        if thinking.get("display") is not None and thinking["display"] not in DISPLAYS:
            raise Refused(f"thinking.display: Input should be {' or '.join(map(repr, DISPLAYS))}")

    @staticmethod
    def _validate_cache_control(body: dict) -> None:
        marks = 0
        blocks = list(body.get("tools") or [])
        system = body.get("system")
        if isinstance(system, list):
            blocks += system
        for i, message in enumerate(body.get("messages") or []):
            content = message.get("content")
            for j, block in enumerate(content if isinstance(content, list) else []):
                if "cache_control" in block and block.get("type") in ("thinking", "redacted_thinking"):
                    raise Refused(f"messages.{i}.content.{j}.{block['type']}.cache_control: Extra inputs are not "
                                  "permitted")
                blocks.append(block)
        marks = sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)
        if marks > 4:
            raise Refused(f"A maximum of 4 blocks with cache_control may be provided. Found {marks}.")

    @staticmethod
    def _validate_server_tools(body: dict) -> None:
        for i, tool in enumerate(body.get("tools") or []):
            kind = tool.get("type") or ""
            family = kind.rsplit("_", 1)[0] if kind.startswith(("web_search_", "web_fetch_")) else None
            if family is None:
                continue
            where = f"tools.{i}.{kind}"
            if kind not in SERVER_TOOL_VERSIONS:
                raise Refused(f"tools.{i}: Input tag '{kind}' found using 'type' does not match any of the expected "
                              f"tags: {', '.join(map(repr, sorted(SERVER_TOOL_VERSIONS)))}")
            if tool.get("name") != family:
                raise Refused(f"{where}.name: Input should be '{family}'")
            for key in tool:
                if key not in SERVER_TOOL_FIELDS[family]:
                    raise Refused(f"{where}.{key}: Extra inputs are not permitted")
            for key in ("allowed_domains", "blocked_domains"):
                domains = tool.get(key)
                if domains is None:
                    continue
                if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
                    raise Refused(f"{where}.{key}: Input should be a valid list of strings")
                if not domains:
                    raise Refused(f"{where}.{key}: Empty list of domains is ambiguous. Provide at least one "
                                  "domain or null.")
                for domain in domains:
                    if "://" in domain or not domain.strip() or " " in domain:
                        raise Refused(f"{where}.{key}: {domain!r} is not a valid domain; give it without the "
                                      "HTTP/HTTPS scheme (example.com).")
            if tool.get("allowed_domains") is not None and tool.get("blocked_domains") is not None:
                raise Refused(f"{where}: allowed_domains and blocked_domains cannot be used together.")
            uses = tool.get("max_uses")
            if uses is not None and (not isinstance(uses, int) or isinstance(uses, bool) or uses < 1):
                raise Refused(f"{where}.max_uses: Input should be greater than or equal to 1")

    def _validate_encrypted(self, i: int, blocks: list) -> None:
        """Search results and citations sent back must carry the opaque values as issued."""
        for j, block in enumerate(blocks):
            values = []
            if block.get("type") == "web_search_tool_result" and isinstance(block.get("content"), list):
                values += [r.get("encrypted_content") for r in block["content"]]
            for citation in block.get("citations") or [] if block.get("type") == "text" else []:
                if citation.get("type") == "web_search_result_location":
                    values.append(citation.get("encrypted_index"))
            with self._lock:
                unknown = [v for v in values if v not in self._encrypted]
            if unknown:
                raise Refused(f"messages.{i}.content.{j}: encrypted content was modified or is not from this "
                              "API; send web search results and citations back exactly as they were returned.")

    def _validate_messages(self, body: dict, model: str) -> None:
        messages = body.get("messages") or []
        if not messages or messages[0].get("role") != "user":
            raise Refused("messages: the first message must use the \"user\" role")
        key = self._conversation_key(body)
        for i, message in enumerate(messages):
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            if message.get("role") == "assistant":
                self._validate_encrypted(i, blocks)
                self._validate_assistant(i, blocks, messages, model, key)
            else:
                self._validate_user(i, blocks, messages)
        if messages[-1].get("role") == "assistant":
            last = [_normal(b) for b in messages[-1]["content"]] if isinstance(messages[-1]["content"], list) else None
            if last not in self._paused:
                raise Refused(f"This model does not support assistant message prefill. The conversation must end "
                              f"with a user message (messages.{len(messages) - 1}).")

    def _validate_assistant(self, i: int, blocks: list, messages: list, model: str, key: str) -> None:
        for j, block in enumerate(blocks):
            if block.get("type") == "thinking":
                if block.get("signature") != self._sign(model, key, block.get("thinking", "")):
                    raise Refused(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
            elif block.get("type") == "redacted_thinking" and not str(block.get("data", "")).startswith("EmwK"):
                raise Refused(f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block")
        issued = None
        for block in blocks:
            if block.get("type") == "tool_use":
                issued = self._issued.get((key, block.get("id")))
                break
        if issued is not None and [_normal(b) for b in blocks] != issued:
            first = blocks[0].get("type") if blocks else "nothing"
            raise Refused(f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                          f"`{first}`. When `thinking` is enabled, an assistant message with `tool_use` blocks must "
                          "be passed back exactly as it was returned, starting with its thinking blocks.")
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if uses and i + 1 < len(messages):
            following = messages[i + 1]
            answered = [b.get("tool_use_id") for b in following.get("content") or []
                        if isinstance(following.get("content"), list) and b.get("type") == "tool_result"]
            missing = [u for u in uses if u not in answered]
            if following.get("role") != "user" or missing:
                raise Refused(f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                              f"after: {', '.join(missing or uses)}. Each `tool_use` block must have a corresponding "
                              "`tool_result` block in the next message.")

    @staticmethod
    def _validate_user(i: int, blocks: list, messages: list) -> None:
        results = [j for j, b in enumerate(blocks) if b.get("type") == "tool_result"]
        if results and results != list(range(len(results))):
            raise Refused(f"messages.{i}: `tool_result` blocks must come first in the user message content.")
        if results:
            previous = messages[i - 1] if i else {}
            asked = {b.get("id") for b in previous.get("content") or []
                     if isinstance(previous.get("content"), list) and b.get("type") == "tool_use"}
            for j in results:
                if blocks[j].get("tool_use_id") not in asked:
                    raise Refused(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                                  f"blocks: {blocks[j].get('tool_use_id')}. Each `tool_result` block must have a "
                                  "corresponding `tool_use` block in the previous message.")

    # --- usage -----------------------------------------------------------------------
    @staticmethod
    def _prompt_blocks(body: dict) -> list[tuple[int, bool]]:
        """(tokens, has a breakpoint) for each cacheable block, in the cache's order:
        tools, system, messages."""
        out = []
        for tool in body.get("tools") or []:
            out.append((_without(tool, "cache_control"), "cache_control" in tool))
        system = body.get("system")
        if isinstance(system, str):
            out.append((system, False))
        for block in system if isinstance(system, list) else []:
            out.append((_without(block, "cache_control"), "cache_control" in block))
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, str):
                out.append(({"role": message["role"], "text": content}, False))
                continue
            for block in content:
                out.append(({"role": message["role"], **_without(block, "cache_control")}, "cache_control" in block))
        return out

    def _usage(self, body: dict) -> dict:
        blocks = self._prompt_blocks(body)
        sizes = [tokens(b) for b, _ in blocks]
        prefix_hashes, running = [], hashlib.sha256(str(body.get("model")).encode())
        for block, _ in blocks:
            running.update(json.dumps(block, sort_keys=True).encode())
            prefix_hashes.append(running.copy().hexdigest())
        total = sum(sizes)
        breakpoints = [k for k, (_, mark) in enumerate(blocks) if mark]
        read_upto = 0
        with self._lock:
            for bp in breakpoints:
                for k in range(bp, max(-1, bp - CACHE_LOOKBACK_BLOCKS), -1):
                    if prefix_hashes[k] in self._cache:
                        read_upto = max(read_upto, k + 1)
                        break
            written_upto = read_upto
            for bp in breakpoints:
                if sum(sizes[:bp + 1]) >= self.row(body.get("model")).min_cacheable_tokens:
                    self._cache.add(prefix_hashes[bp])
                    written_upto = max(written_upto, bp + 1)
        read = sum(sizes[:read_upto])
        written = sum(sizes[read_upto:written_upto])
        return {"input_tokens": total - read - written, "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": 0}}

    # --- server tools (web search, web fetch) ------------------------------------------------
    @staticmethod
    def _offered(body: dict, family: str) -> dict | None:
        return next((t for t in body.get("tools") or [] if str(t.get("type", "")).startswith(family + "_")), None)

    @staticmethod
    def _domain_allowed(url: str, tool: dict) -> bool:
        parts = urlsplit(url)

        def matches(domain: str) -> bool:
            host, _, path = domain.partition("/")
            return (parts.hostname == host or (parts.hostname or "").endswith("." + host)) and \
                (not path or parts.path.lstrip("/").startswith(path))
        if tool.get("allowed_domains"):
            return any(matches(d) for d in tool["allowed_domains"])
        if tool.get("blocked_domains"):
            return not any(matches(d) for d in tool["blocked_domains"])
        return True

    def _opaque(self, *parts: str) -> str:
        return base64.b64encode(hmac.new(self._secret, "\n".join(parts).encode(), hashlib.sha256).digest()).decode()

    def _run_server_tools(self, blocks: list, body: dict) -> tuple[list, dict]:
        """Expand scripted searches, fetches and citations the way the API would for this
        request; (blocks, the usage's server_tool_use part)."""
        out, found, fetched_now, searches, fetches = [], {}, {}, 0, 0
        seen_text = json.dumps(body.get("messages") or [])
        uses = {"web_search": 0, "web_fetch": 0}
        for block in blocks:
            kind = block.get("type")
            if kind in ("_web_search", "_web_fetch"):
                family = "web_search" if kind == "_web_search" else "web_fetch"
                tool = self._offered(body, family)
                if tool is None:
                    raise ScriptError(f"the script uses {family} but the request offers no {family} tool")
                server_id = f"srvtoolu_fake_{next(_ids):04d}"
                uses[family] += 1
                limit = tool.get("max_uses")
                over = limit is not None and uses[family] > limit
                if family == "web_search":
                    out.append({"type": "server_tool_use", "id": server_id, "name": "web_search",
                                "input": {"query": block["query"]}})
                    code = "max_uses_exceeded" if over else block.get("error_code")
                    if code:
                        content = {"type": "web_search_tool_result_error", "error_code": code}
                    else:
                        searches += 1
                        content = []
                        for url, title, page in block["results"]:
                            if not self._domain_allowed(url, tool):
                                continue
                            found[url] = (title, page)
                            content.append({"type": "web_search_result", "url": url, "title": title,
                                            "encrypted_content": self._opaque("content", url, page),
                                            "page_age": "3 days ago"})
                    out.append({"type": "web_search_tool_result", "tool_use_id": server_id, "content": content})
                else:
                    url = block["url"]
                    out.append({"type": "server_tool_use", "id": server_id, "name": "web_fetch", "input": {"url": url}})
                    code = ("max_uses_exceeded" if over else "url_not_allowed" if not self._domain_allowed(url, tool)
                            else "url_not_in_prior_context" if url not in found and url not in seen_text else None)
                    if code:
                        content = {"type": "web_fetch_tool_result_error", "error_code": code}
                    else:
                        fetches += 1
                        title, page = found.get(url, (url, f"The page at {url}."))
                        if (tool.get("citations") or {}).get("enabled"):
                            fetched_now[url] = (len(fetched_now), title, page)
                        content = {"type": "web_fetch_result", "url": url, "retrieved_at": "2026-12-01T12:00:00Z",
                                   "content": {"type": "document", "title": title,
                                               "source": {"type": "text", "media_type": "text/plain", "data": page},
                                               "citations": tool.get("citations")}}
                    out.append({"type": "web_fetch_tool_result", "tool_use_id": server_id, "content": content})
            elif kind == "text" and "_cite" in block:
                citations = []
                for url, cited_text in block.pop("_cite"):
                    if url in fetched_now:  # a fetched page is a document: cited by title and position
                        index, title, page = fetched_now[url]
                        start = max(0, page.find(cited_text))
                        citations.append({"type": "char_location", "cited_text": cited_text, "document_index": index,
                                          "document_title": title, "start_char_index": start,
                                          "end_char_index": start + len(cited_text)})
                    elif url in found:
                        citations.append({"type": "web_search_result_location", "url": url, "title": found[url][0],
                                          "cited_text": cited_text,
                                          "encrypted_index": self._opaque("index", url, cited_text)})
                out.append({**block, "citations": citations} if citations else block)
            else:
                out.append(block)
        usage = {"server_tool_use": {"web_search_requests": searches, "web_fetch_requests": fetches}} \
            if searches or fetches else {}
        return out, usage

    # --- building the answer -----------------------------------------------------------
    def _message(self, turn: dict, body: dict) -> dict:
        model = body["model"]
        row = self.row(model)
        thinking = body.get("thinking") or {}
        kind = thinking.get("type") or ("adaptive" if row.thinks_by_default else "disabled")
        thinks = kind != "disabled"
        # between_tools turns off the up-front thinking; the short updates written between
        # tool calls still come back as thinking blocks, with their text (What's new in 5.5).
        display = "summarized" if kind == "between_tools" else thinking.get("display") or row.default_display
        blocks, server_usage = self._run_server_tools(copy.deepcopy(turn["content"]), body)
        narration = [turn["_thinking"]] if turn.get("_thinking") and kind in ("adaptive", "enabled") else []
        if thinks and row.text_between_tools_in_thinking and any(b["type"] == "tool_use" for b in blocks):
            # Sonnet 5.5: the text written before a tool call comes back inside the thinking block
            # (text that cites search results stays a text block: citations live on text blocks).
            first_tool = next(i for i, b in enumerate(blocks) if b["type"] == "tool_use")
            folded = [i for i, b in enumerate(blocks[:first_tool]) if b["type"] == "text" and not b.get("citations")]
            narration += [blocks[i]["text"] for i in folded]
            blocks = [b for i, b in enumerate(blocks) if i not in folded]
        content = blocks
        if thinks:
            thought = "\n\n".join(narration) if display == "summarized" else ""
            signature = self._sign(model, self._conversation_key(body), thought)
            content = [{"type": "thinking", "thinking": thought, "signature": signature}] + blocks
        full_output = turn.get("_output_tokens") or tokens(content) + tokens("\n\n".join(narration))
        stop_reason = turn["stop_reason"]
        output = full_output
        if full_output > body["max_tokens"]:
            # Cut off: the tool calls never got written; the text stops mid-way.
            content = [b for b in content if b["type"] in ("thinking", "text")]
            for block in content:
                if block["type"] == "text":
                    block["text"] = block["text"][: max(1, len(block["text"]) * body["max_tokens"] // full_output)]
            stop_reason, output = "max_tokens", body["max_tokens"]
        message = {"id": f"msg_fake_{next(_ids):04d}", "type": "message", "role": "assistant", "model": model,
                   "content": content, "stop_reason": stop_reason, "stop_sequence": None,
                   "usage": {**self._usage(body), "output_tokens": output, **server_usage}}
        if "stop_details" in turn and stop_reason == turn["stop_reason"]:
            message["stop_details"] = turn["stop_details"]
        with self._lock:
            normal = [_normal(b) for b in content]
            for block in content:
                if block["type"] == "tool_use":
                    self._issued[(self._conversation_key(body), block["id"])] = normal
            if stop_reason == "pause_turn":
                self._paused.append(normal)
            for block in content:
                if block["type"] == "web_search_tool_result" and isinstance(block["content"], list):
                    self._encrypted.update(r["encrypted_content"] for r in block["content"])
                for citation in block.get("citations") or [] if block["type"] == "text" else []:
                    if citation["type"] == "web_search_result_location":
                        self._encrypted.add(citation["encrypted_index"])
        return message

    @staticmethod
    def _events(message: dict) -> list[tuple[str, dict]]:
        """The message as the streaming API sends it (event name, data)."""
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {**message["usage"], "output_tokens": 1}}
        start.pop("stop_details", None)
        events = [("message_start", {"type": "message_start", "message": start}), ("ping", {"type": "ping"})]
        for index, block in enumerate(message["content"]):
            kind = block["type"]
            if kind == "thinking":
                opening = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = ([{"type": "thinking_delta", "thinking": block["thinking"]}] if block["thinking"] else []) + \
                         [{"type": "signature_delta", "signature": block["signature"]}]
            elif kind == "text":
                opening = {"type": "text", "text": ""}
                half = len(block["text"]) // 2
                deltas = [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
                deltas += [{"type": "text_delta", "text": part} for part in (block["text"][:half], block["text"][half:])
                           if part]
            elif kind in ("tool_use", "server_tool_use"):
                opening = {**block, "input": {}}
                raw = json.dumps(block["input"])
                deltas = [{"type": "input_json_delta", "partial_json": raw[:len(raw) // 2]},
                          {"type": "input_json_delta", "partial_json": raw[len(raw) // 2:]}]
            else:  # redacted_thinking, web_search_tool_result: sent whole
                opening, deltas = block, []
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": opening}))
            events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                       for d in deltas]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        if message.get("stop_details"):
            delta["stop_details"] = message["stop_details"]
        events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": message["usage"]}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    # --- serving ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def answer(self, body: dict) -> tuple[int, dict, dict]:
        """(status, payload, headers) for one Messages API request body."""
        try:
            self._validate(body)
        except Refused as exc:
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}}, {}
        prompt = sum(tokens(b) for b, _ in self._prompt_blocks(body))
        context_window, _ = self.limits(body.get("model"))
        if prompt > context_window:
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message":
                         f"prompt is too long: {prompt} tokens > {context_window} maximum"}}, {}
        turn = self._next_turn(body)
        while turn and turn.get("_kind") == "slow":
            time.sleep(turn["seconds"])
            turn = turn["turn"]
        if turn is None:
            return 500, {"type": "error", "error": {
                "type": "api_error", "message": "fake Anthropic: the test script ran out of turns"}}, {}
        if turn["_kind"] == "error":
            headers = {"retry-after": str(turn["retry_after"])} if turn["retry_after"] is not None else {}
            return turn["status"], copy.deepcopy(turn["body"]), headers
        try:
            message = self._message(turn, body)
        except ScriptError as exc:
            return 500, {"type": "error", "error": {"type": "api_error", "message": f"fake Anthropic: {exc}"}}, {}
        if self.record:
            self.responses.append(message)
        return 200, message, {}

    def start(self) -> "FakeAnthropic":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None):
                request_id = f"req_fake_{next(_ids):04d}"
                if payload.get("type") == "error":
                    payload = {**payload, "request_id": request_id}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", request_id)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.send_header("request-id", f"req_fake_{next(_ids):04d}")
                self.end_headers()
                try:
                    for name, data in fake._events(message):
                        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up mid-stream (a cancelled or killed run): the API just stops
                self.close_connection = True

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self._send(400, {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "body is not JSON"}})
                if fake.record:
                    fake.requests.append(RecordedRequest(self.path, dict(self.headers), body))
                if self.path.split("?")[0].rstrip("/") != "/v1/messages":
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                                        "message": f"no route {self.path}"}})
                # The API reference: every request carries the key in x-api-key and names
                # the API version in anthropic-version (a Bearer token is the OAuth form).
                if not self.headers.get("x-api-key"):
                    return self._send(401, {"type": "error", "error": {
                        "type": "authentication_error", "message": "x-api-key header is required"}})
                if not self.headers.get("anthropic-version"):
                    return self._send(400, {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "anthropic-version: header is required"}})
                status, payload, headers = fake.answer(body)
                if status == 200 and body.get("stream"):
                    return self._stream(payload)
                return self._send(status, payload, headers)

        self._server = ThreadingHTTPServer(self.bind, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
