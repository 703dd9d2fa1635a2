"""The one table of models (services.claude.model_catalog) holds the published numbers, as read
on 2026-12-02 from platform.claude.com (pricing page, model pages, the English Sonnet 5.5
migration guide, "Troubleshooting thinking", "Prompt caching"). These tests pin each value
to its published figure: a change to the table is a deliberate re-read of those pages."""
from __future__ import annotations

import pytest

from services.claude import model_catalog
from services.claude.model_catalog import Price

# (model, input, output, 5-minute cache write, cache read) in USD per million tokens.
PUBLISHED_PRICES = [
    ("claude-sonnet-5-5", 2.00, 10.00, 2.50, 0.10),  # cache read halved: Sonnet 5.5 migration guide
    ("claude-sonnet-5", 2.00, 10.00, 2.50, 0.20),
    ("claude-haiku-4-5", 1.00, 5.00, 1.25, 0.10),
]
# (model, context window, maximum output, minimum cacheable prompt)
PUBLISHED_LIMITS = [
    ("claude-sonnet-5-5", 1_000_000, 128_000, 512),
    ("claude-sonnet-5", 1_000_000, 128_000, 1024),
    ("claude-haiku-4-5", 200_000, 64_000, 4096),
]


@pytest.mark.parametrize("model, input, output, cache_write, cache_read", PUBLISHED_PRICES)
def test_prices_are_the_published_ones(model, input, output, cache_write, cache_read):
    """Are the four rates of each model the published ones (USD per million tokens)?"""
    assert model_catalog.MODELS[model].price == Price(input, output, cache_write, cache_read)


@pytest.mark.parametrize("model, context, output, cacheable", PUBLISHED_LIMITS)
def test_limits_are_the_published_ones(model, context, output, cacheable):
    """Context window, maximum output and minimum cacheable prompt, per model."""
    row = model_catalog.MODELS[model]
    assert (row.context_window, row.max_output, row.min_cacheable_tokens) == (context, output, cacheable)


def test_thinking_and_effort_by_model():
    """Sonnet 5.5: adaptive (default) and between_tools; Sonnet 5: adaptive and disabled;
    Haiku 4.5: extended thinking only, no effort parameter."""
    sonnet55, sonnet5, haiku = (model_catalog.MODELS[m] for m in ("claude-sonnet-5-5", "claude-sonnet-5",
                                                                  "claude-haiku-4-5"))
    assert sonnet55.thinking_types == {"adaptive", "between_tools"} and sonnet55.thinks_by_default
    assert sonnet55.text_between_tools_in_thinking and sonnet55.default_display == "omitted"
    assert sonnet5.thinking_types == {"adaptive", "disabled"} and not sonnet5.text_between_tools_in_thinking
    assert haiku.thinking_types == {"enabled", "disabled"} and not haiku.adaptive and not haiku.thinks_by_default
    assert sonnet55.efforts == sonnet5.efforts == ("low", "medium", "high", "xhigh", "max") and haiku.efforts == ()


def test_a_model_the_table_lacks_has_no_price_and_current_settings():
    """An unknown model is priced "unknown" (None, never $0) and sent what current models take."""
    row = model_catalog.get("claude-unreleased-9")
    assert row.id == "claude-unreleased-9" and row.price is None and row.adaptive and row.efforts
    assert not model_catalog.known("claude-unreleased-9") and model_catalog.known("claude-haiku-4-5")


def test_the_effort_sent_is_one_the_model_takes():
    """The agent's effort when the model has it; none for a model without an effort parameter."""
    sonnet = model_catalog.MODELS["claude-sonnet-5-5"]
    assert model_catalog.effort_for(sonnet, "xhigh") == "xhigh"
    assert model_catalog.effort_for(model_catalog.MODELS["claude-haiku-4-5"], "high") is None
    three = model_catalog.Model("m", 1, 1, None, efforts=("low", "medium", "high"))
    assert model_catalog.effort_for(three, "max") == "high" and model_catalog.effort_for(three, "low") == "low"


def test_a_calls_cost_counts_every_kind_of_token_and_each_search():
    """A million tokens of each kind plus three searches, at Sonnet 5.5's rates."""
    price = model_catalog.MODELS["claude-sonnet-5-5"].price
    assert model_catalog.usd(price, input_tokens=10**6, output_tokens=10**6, cache_write_tokens=10**6,
                             cache_read_tokens=10**6, web_searches=3) == pytest.approx(2 + 10 + 2.5 + 0.1 + 0.03)
