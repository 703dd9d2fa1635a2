"""The Claude models Sagan knows, in one table: prices, limits and what each model accepts.

Both sides read it: the agent loop (services.claude.model_api) builds each request from the
model's row, and the test suite's fake Messages API (tests/fakes/anthropic_server.py) refuses
what the row says the model refuses, with the real error shape. tests/unit/test_model_catalog.py
pins every number below to the published value it came from, so a change here is a change
of what the published pages say, made on purpose.

Checked 2026-12-02 against platform.claude.com (English pages unless said otherwise):
- Prices (USD per million tokens): "Pricing" (about-claude/pricing) and each model's page.
  Claude Sonnet 5.5's cache read is $0.10: the English "Claude Sonnet 5.5 migration guide"
  (and its ko, de, pt-BR translations) says it costs "$0.10 USD per million tokens, half the
  Claude Sonnet 5 rate" (the cut of 2026-10-07, which price trackers recorded that week).
  The zh-CN and pt-BR model overviews still show $0.20, and the docs search's copy of the
  English pricing page is cut off before its Sonnet 5.5 row; the guide is the newer text.
  Sonnet 5.5's other rates are Sonnet 5's: $2 in, $10 out, $2.50 for a 5-minute cache
  write. Claude Haiku 4.5: $1 / $5 / $1.25 / $0.10.
- Limits: the model overview table ("Context", "Max output"): Sonnet 5.5 and Sonnet 5 1M /
  128K, Haiku 4.5 200K / 64K.
- Thinking ("Troubleshooting thinking", the table of thinking support by model; "What's new
  in Claude Sonnet 5.5"): Sonnet 5.5 accepts `adaptive` (its default, on) and
  `between_tools` (only Sonnet 5.5 does; refused at effort xhigh or max), and refuses
  `enabled` and `disabled`. Sonnet 5 accepts `adaptive` (on by default) and `disabled`,
  refuses `enabled`. Haiku 4.5 has extended thinking only (`enabled` with a budget, off by
  default); it refuses `adaptive` ("adaptive thinking is not supported on this model", the
  400 quoted in public issue threads) and has no effort parameter (the overview table's
  "Default effort" is "—").
- The `display` of thinking: `summarized` returns the thinking text, `omitted` an empty text
  with its signature (the installed SDK's ThinkingConfigAdaptiveParam, anthropic 2.14.0, has
  exactly these two). Sonnet 5 and 5.5 default to `omitted`; the Claude 4 models to
  `summarized`. On Sonnet 5.5 the text written between tool calls comes back inside the
  thinking blocks, so only `summarized` returns it (What's new: "until it sets a display
  value that returns the text"). A third value, `updates` behind a beta header, is claimed
  by some third-party crates; no Anthropic page in our docs search documents it and the SDK
  does not know it, so it is not used.
- Minimum cacheable prompt ("Prompt caching"; the Sonnet 5.5 comparison tables): 512
  tokens on Sonnet 5.5, 1,024 on Sonnet 5, 4,096 on Haiku 4.5.
- Web search: $10 per 1,000 searches on top of tokens; web fetch costs only its tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

EFFORTS = ("low", "medium", "high", "xhigh", "max")
# Effort levels at which Sonnet 5.5 refuses `between_tools` (thinking turned off).
EFFORTS_NEEDING_THINKING = ("xhigh", "max")
WEB_SEARCH_USD = 10.0 / 1000  # per search that ran (failed searches are not billed)


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""
    input: float
    output: float
    cache_write: float  # a 5-minute cache write (the loop's breakpoints use the default TTL)
    cache_read: float


@dataclass(frozen=True)
class Model:
    """One model's published limits, prices and the request settings it accepts."""

    id: str
    context_window: int
    max_output: int
    price: Price | None
    # The `thinking.type` values the model accepts; any other is a 400.
    thinking_types: frozenset = frozenset()
    # Does the model think with no `thinking` field (adaptive on by default)?
    thinks_by_default: bool = False
    default_display: str = "summarized"
    # `output_config.effort` levels it takes; () when it has no effort parameter.
    efforts: tuple = ()
    # Sonnet 5.5: the text written before a tool call comes back inside the thinking block.
    text_between_tools_in_thinking: bool = False
    min_cacheable_tokens: int = 1024

    @property
    def adaptive(self) -> bool:
        return "adaptive" in self.thinking_types


MODELS: dict[str, Model] = {model.id: model for model in (
    Model("claude-sonnet-5-5", 1_000_000, 128_000, Price(2.0, 10.0, 2.50, 0.10),
          frozenset({"adaptive", "between_tools"}), True, "omitted", EFFORTS, True, 512),
    Model("claude-sonnet-5", 1_000_000, 128_000, Price(2.0, 10.0, 2.50, 0.20),
          frozenset({"adaptive", "disabled"}), True, "omitted", EFFORTS, False, 1024),
    Model("claude-haiku-4-5", 200_000, 64_000, Price(1.0, 5.0, 1.25, 0.10),
          frozenset({"enabled", "disabled"}), False, "summarized", (), False, 4096),
)}

# A model the table does not know (a newer one, or SAGAN_AGENT_MODEL's test model): treated
# as a current model (adaptive thinking and effort), with conservative limits and no price
# (its runs show "price unknown", never $0.00).
UNKNOWN = Model("", 200_000, 64_000, None, frozenset({"adaptive", "disabled"}), True, "omitted", EFFORTS, False, 1024)


def get(model_id: str | None) -> Model:
    """The row of `model_id`, or UNKNOWN (with that id) for a model the table lacks."""
    return MODELS.get(model_id or "") or replace(UNKNOWN, id=model_id or "")


def known(model_id: str | None) -> bool:
    return (model_id or "") in MODELS


def effort_for(model: Model, wanted: str) -> str | None:
    """The effort to send for an agent that asks for `wanted`: it, when the model takes it;
    else the highest level the model takes below it; None when the model has no effort."""
    if not model.efforts:
        return None
    if wanted in model.efforts:
        return wanted
    rank = EFFORTS.index(wanted) if wanted in EFFORTS else EFFORTS.index("medium")
    below = [e for e in model.efforts if e in EFFORTS and EFFORTS.index(e) <= rank]
    return below[-1] if below else model.efforts[0]


def usd(price: Price, *, input_tokens: int = 0, output_tokens: int = 0, cache_write_tokens: int = 0,
        cache_read_tokens: int = 0, web_searches: int = 0) -> float:
    """What one call costs at `price`: each kind of token at its rate, plus searches."""
    return (input_tokens * price.input + output_tokens * price.output + cache_write_tokens * price.cache_write
            + cache_read_tokens * price.cache_read) / 1_000_000 + web_searches * WEB_SEARCH_USD


def searches_of(usage) -> int:
    """The web searches one call ran (the API bills each; failed ones are not counted)."""
    server = getattr(usage, "server_tool_use", None)
    return int(getattr(server, "web_search_requests", None) or 0)


def search_cost(usage) -> float:
    """USD of the web searches one call made."""
    return searches_of(usage) * WEB_SEARCH_USD
