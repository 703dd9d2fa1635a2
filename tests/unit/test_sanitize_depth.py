"""Deep markup is refused before parsing, and sanitizing is linear.

Sanitizing 16k nested `<div>`s took 16–22 s and 30k timed gunicorn out. The bounds
below are the issue's "under a second" for a 200 KB hostile document: the refusal itself
takes a few milliseconds, so a loaded CI machine has ample margin.
"""
from __future__ import annotations

import gc
import time

import pytest

from services.core.sanitize import (
    MAX_NESTING_DEPTH,
    MarkupTooDeep,
    nesting_depth,
    render_markdown,
    sanitize_html,
    sanitize_result_html,
)

HOSTILE_200KB = {
    "30k nested divs": "<div>" * 30_000 + "x" * 50_000,
    "nested and closed": "<div>" * 18_000 + "x" + "</div>" * 18_000,
    "nested svg groups": "<svg>" + "<g>" * 40_000,
    "nested tables": "<table><tr><td>" * 13_000,
    "nested lists": "<ul><li>" * 25_000,
    "unclosed formatting": "<b><i><u>" * 20_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_200KB))
@pytest.mark.parametrize("clean", [sanitize_html, sanitize_result_html])
def test_a_200kb_deeply_nested_document_is_refused_in_under_a_second(name, clean):
    """Is each ~200 KB deeply nested document refused with a clear error in well under a second?"""
    document = HOSTILE_200KB[name]
    assert 100_000 <= len(document) <= 220_000
    started = time.process_time()
    with pytest.raises(MarkupTooDeep) as refused:
        clean(document)
    assert time.process_time() - started < 1.0
    assert f"the limit is {MAX_NESTING_DEPTH}" in refused.value.message
    assert refused.value.status_code == 400


def test_markdown_nested_past_the_limit_is_refused_before_rendering():
    """Do 20k nested list items or quotes (Python-Markdown overflowed its stack on these) get
    a 400-class refusal at once instead of a RecursionError?"""
    for text in ("- " * 20_000 + "x", ">" * 30_000 + " x", "1. " * 5_000 + "x"):
        started = time.process_time()
        with pytest.raises(MarkupTooDeep):
            render_markdown(text)
        assert time.process_time() - started < 1.0


def test_a_paragraph_of_brackets_renders_verbatim_and_fast():
    """Does a paragraph of 30k `[` (Python-Markdown's link pattern never finished on it) come
    back quickly, as verbatim code, with short ordinary paragraphs rendered as usual?"""
    text = "A [link](https://example.org) stays a link.\n\n" + "[" * 30_000 + "x" + "]" * 30_000
    started = time.process_time()
    html = render_markdown(text)
    assert time.process_time() - started < 2.0
    assert '<a href="https://example.org"' in html
    assert "<pre><code>[[[" in html


def test_nesting_depth_counts_what_a_parser_would_nest():
    """Are void, self-closed and optional-end elements, raw text and comments not counted, and
    misnested end tags closed back to their element?"""
    assert nesting_depth("<div><p>a<p>b<p>c</div>") == 1
    assert nesting_depth("<ul><li>a<li>b</ul>") == 1
    assert nesting_depth("<div><br><img src=x><hr></div>") == 1
    assert nesting_depth("<svg><g><path d='M0'/><circle r='1'/></g></svg>") == 2
    assert nesting_depth("<script>" + "<div>" * 500 + "</script>") == 0
    assert nesting_depth("<!--" + "<div>" * 500 + "-->") == 0
    assert nesting_depth("<div><span><b></div>") == 3
    assert nesting_depth("<div><span><b></div><i>") == 3


def test_documents_at_the_limit_still_sanitize():
    """Is markup exactly at the depth limit sanitized normally (the limit refuses only past it)?"""
    inside = "<div>" * MAX_NESTING_DEPTH + "deep" + "</div>" * MAX_NESTING_DEPTH
    assert "deep" in sanitize_result_html(inside)
    with pytest.raises(MarkupTooDeep):
        sanitize_result_html("<div>" + inside + "</div>")


def test_wide_documents_sanitize_in_linear_time():
    """Is sanitizing thousands of sibling SVGs linear: 8× the siblings take well under 64×
    (quadratic) the time? html5lib's own ElementTree walker rescanned a parent's children
    each time it climbed back up: 8× took 29× as long."""
    unit = "<svg><g></g></svg>"

    def timed(count):
        """The best of three runs in this process's CPU time: other processes on a busy machine
        do not count, and the fastest run is the least disturbed. The garbage collector is held
        off while timing: a collection's cost grows with everything alive in the test session,
        not with the document, and one landing in the large run made it look quadratic."""
        document = unit * count
        best = float("inf")
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                started = time.process_time()
                sanitize_result_html(document)
                best = min(best, time.process_time() - started)
        finally:
            gc.enable()
        return best
    timed(200)  # warm up
    small, large = timed(1_000), timed(8_000)
    if large >= 16 * max(small, 0.01):
        small, large = timed(1_000), timed(8_000)  # once more: a miss on a loaded machine is measured again
    assert large < 16 * max(small, 0.01), (small, large)


@pytest.mark.parametrize("document", ["<script " * 25_000, "<div " * 40_000, "<!--" * 50_000,
                                      '<a title="' * 20_000, "<script>" + "</scrip" * 25_000, "<" * 200_000])
def test_the_depth_check_itself_is_linear_on_unclosed_constructs(document):
    """Do 200 KB of unclosed tags, comments and raw-text openers (each a quadratic rescan for a
    regex) pass the depth check in well under a second?"""
    started = time.process_time()
    nesting_depth(document)
    assert time.process_time() - started < 1.0
