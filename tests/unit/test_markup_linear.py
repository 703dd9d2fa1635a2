"""Rendering and sanitizing outside text is linear in its length, and bounded.

Python-Markdown and html5lib were super-linear on several shapes of hostile text: a run of
unclosed `<a ` (8,000 took 6 s, a 150 KB plan six minutes), text split into many small tokens,
backtick runs, blocks of lines that each end the block, runs of `(` for the linkifier. Each
shape is rendered at 10 KB and 40 KB; four times the text must take under eight times the time
(quadratic would be sixteen; linear is four, and a 30 ms measurement wobbles by a few ms, so
a bound of six failed once on an idle machine, at 6.1). Shapes whose cost was quadratic
within one block (a block is bounded in size, so more blocks only add) are caught by the
second bound: no shape may cost more than a few times what as much ordinary, markup-rich
markdown costs (a plan's headings, lists, emphasis, links, code and a table — per byte several
times dearer than plain prose, so a shape made only of tags, headings or quotes is compared
with text of its kind).

Times are this process's CPU time (other processes on a busy machine do not count); a bound
missed once is measured again before it fails, so one preempted run is not a failure.
"""
from __future__ import annotations

import gc
import time

import pytest

from services.core.markdown_bounds import BLOCK_MAX_LINES, RENDER_MAX_BLOCKS, RENDER_MAX_CHARS
from services.core.sanitize import link_citations, render_markdown, sanitize_html

SMALL, LARGE = 10_000, 40_000
# Four times the text may take at most this many times as long: half of quadratic's sixteen.
RATIO_BOUND = 8
# How much dearer per byte than ordinary markdown a hostile shape may be. The dearest shapes
# measured (a heading per line, a quote per line, flat `<b>` tags) cost about 2.5 times as
# much: each is an element per few bytes, and every element costs the markdown parser and
# the sanitizer (html5lib, in Python) the same fixed amount. Quadratic-within-a-block shapes
# on the old renderer cost 8 to over 100 times as much.
ORDINARY_MULTIPLE = 5


def _blocks(unit: str, size: int, block: int = 2_500) -> str:
    """`unit` repeated to about `size` characters, in blocks of about `block` characters
    separated by blank lines (under every per-block limit)."""
    per_block = max(1, block // len(unit))
    count = max(1, round(size / (per_block * len(unit))))
    return "\n\n".join(unit * per_block for _ in range(count))


ORDINARY = ("## Step 3: probe layer 12\n\n"
            "The **probe** reads `layer_12` and reports *accuracy* on the [held-out split]"
            "(https://example.org/data), as in #12 and https://example.org/paper.\n\n"
            "- train on 80% of the tokens\n- test on the other 20%\n\n"
            "| model | accuracy |\n|---|---|\n| linear | 0.91 |\n\n")

ADVERSARIAL = {
    "unclosed <a": lambda size: "<a " * (size // 3),
    "unclosed <a on lines": lambda size: "text <a \n" * (size // 9),
    "runs of <": lambda size: "<" * size,
    "< and spaces": lambda size: "< " * (size // 2),
    "unclosed quoted attributes": lambda size: '<p title="' * (size // 10),
    "backtick runs": lambda size: _blocks("``a`", size, block=10_000),
    "setext headings": lambda size: _blocks("x\n=\n", size, block=1_500),
    "headings with pipes": lambda size: _blocks("# x |\n", size, block=2_000),
    "rules": lambda size: _blocks("---\n", size, block=1_500),
    "open brackets then parens": lambda size: _blocks("[" * 200 + "x" + "(" * 2_299, size),
    "links with open targets": lambda size: _blocks("[x](" + "(" * 12, size),
    "runs of (": lambda size: _blocks("(", size),
    "hyphenated words": lambda size: _blocks("a-", size, block=10_000),
    "entities": lambda size: "&amp" * (size // 4),
    "flat links": lambda size: _blocks("[x](https://example.org/a) ", size),
    "flat tags": lambda size: _blocks("<b>x</b>", size),
    "empty paragraphs": lambda size: "x\n\n" * (size // 3),
    "quotes": lambda size: _blocks("> x\n", size, block=1_500),
}


def _cpu(call, text: str, runs: int = 1) -> float:
    """The best of `runs` CPU times of call(text), with the cyclic garbage collector off: in a
    long test session its full collections walk every object earlier tests left alive, a
    cost of the session, not of the text."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            started = time.process_time()
            call(text)
            best = min(best, time.process_time() - started)
    finally:
        gc.enable()
    return best


@pytest.fixture(scope="module")
def ordinary_seconds():
    """The CPU time LARGE characters of ordinary, markup-rich markdown take: the yardstick."""
    text = ORDINARY * round(LARGE / len(ORDINARY))
    return _cpu(render_markdown, text, runs=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_rendering_hostile_markdown_is_linear_and_bounded(name, ordinary_seconds):
    """Does four times as much of each hostile shape take under eight times as long to render,
    and no more than a few times as long as as much ordinary markdown?"""
    make = ADVERSARIAL[name]
    small, large = make(SMALL), make(LARGE)
    assert 3.5 < len(large) / len(small) < 4.5
    small_seconds = _cpu(render_markdown, small, runs=3)  # the first run warms up
    large_seconds = _cpu(render_markdown, large)
    ratio_bound = RATIO_BOUND * max(small_seconds, 0.01)
    cost_bound = ORDINARY_MULTIPLE * max(ordinary_seconds, 0.05)
    if large_seconds >= min(ratio_bound, cost_bound):
        large_seconds = min(large_seconds, _cpu(render_markdown, large, runs=2))  # once more: preempted?
    assert large_seconds < ratio_bound, (small_seconds, large_seconds)
    assert large_seconds < cost_bound, (ordinary_seconds, large_seconds)


@pytest.mark.parametrize("document", ["&lt; " * 10_000, "<b>x</b> " * 5_000, "(" * 40_000 + " https://example.org"])
def test_sanitizing_flat_markup_is_linear(document):
    """Is sanitizing flat HTML (entities, sibling tags, a run of `(` before an address) linear:
    four times the text in under eight times the time?"""
    quarter = document[: len(document) // 4]
    small = _cpu(sanitize_html, quarter, runs=3)
    large = _cpu(sanitize_html, document)
    if large >= RATIO_BOUND * max(small, 0.01):
        large = min(large, _cpu(sanitize_html, document, runs=2))
    assert large < RATIO_BOUND * max(small, 0.01), (small, large)


def test_text_past_the_limits_is_shown_verbatim():
    """Is text past the character limit, and blocks past the block limit, shown escaped in a
    preformatted block rather than rendered (or lost)?"""
    html = render_markdown("**bold**\n\n" + "a" * RENDER_MAX_CHARS + "<script>x</script>")
    assert "<strong>bold</strong>" in html
    assert '<pre class="verbatim"><code>' in html and "&lt;script&gt;x&lt;/script&gt;" in html
    html = render_markdown("p\n\n" * RENDER_MAX_BLOCKS + "**late**")
    assert html.count("<p>p</p>") == RENDER_MAX_BLOCKS
    assert "**late**" in html and "<strong>" not in html


def test_a_block_of_too_many_lines_is_code():
    """Is a block with more lines than the block limit shown as code, and one under it rendered?"""
    assert "<pre><code>" in render_markdown("- item\n" * (BLOCK_MAX_LINES + 1))
    assert "<li>item</li>" in render_markdown("- item\n" * (BLOCK_MAX_LINES - 1))


def test_what_ordinary_markdown_renders_to_is_unchanged():
    """Do tags, comments, autolinks, angle-bracketed link targets, code with `<`, tables and
    a `<` that starts no tag render as before?"""
    html = render_markdown(
        "a <kbd>Ctrl</kbd> b <!-- hidden --> c <https://example.org> and 1 < 2\n\n"
        "[title](<https://example.org/a b>) `x < y`\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```\nif a < b:\n```")
    assert "<kbd>Ctrl</kbd>" in html and "hidden" not in html
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">https://example.org</a>' in html
    assert "1 &lt; 2" in html
    assert 'href="https://example.org/a%20b"' in html or 'href="https://example.org/a b"' in html
    assert "<code>x &lt; y</code>" in html
    assert "<td>1</td>" in html
    assert "if a &lt; b:" in html
    assert render_markdown("<a <b>bold</b>") == "<p>&lt;a <b>bold</b></p>"


def _every_citation_in_the_library(keys):
    return {key: ("/library/00000000-0000-0000-0000-000000000000", "A paper") for key in keys}


@pytest.mark.parametrize("document", [
    "arXiv:2401.01234 " * 2_500,
    "<p>doi:10.1000/" + "x" * 40_000 + "</p>",
    "doi:10.1000/" + ")" * 40_000,
    "<p>" + "arxiv:" * 7_000 + "</p>",
    "<b>arXiv:2401.01234</b> <code>doi:10.1000/x</code> " * 800,
])
def test_linking_citations_is_linear(document):
    """Is linking citations to the library (on sanitized markup, as pages show it) linear: four
    times the text in under eight times the time — many citations, one endless DOI, a run of
    closing parentheses to trim, prefixes without ids, citations among tags and code?"""
    html = sanitize_html(document)
    quarter = sanitize_html(document[: len(document) // 4])

    def link(text):
        return link_citations(text, _every_citation_in_the_library)
    small = _cpu(link, quarter, runs=3)
    large = _cpu(link, html)
    if large >= RATIO_BOUND * max(small, 0.01):
        large = min(large, _cpu(link, html, runs=2))
    assert large < RATIO_BOUND * max(small, 0.01), (small, large)
