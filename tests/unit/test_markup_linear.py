"""Rendering and sanitizing outside text is linear in its length, and bounded.

Python-Markdown and html5lib were super-linear on several shapes of hostile text: a run of
unclosed `<a ` (8,000 took 6 s, a 150 KB plan six minutes), text split into many small tokens,
backtick runs, blocks of lines that each end the block, runs of `(` for the linkifier. Each
shape is rendered at about 50 KB and 200 KB; four times the text must take well under
sixteen times (quadratic) the time — under six times. And, so that a linear but slow path
is caught too, no shape may take more than a fixed multiple of the time 200 KB of ordinary
prose takes. Times are this process's CPU time, best of two: other processes on a busy
machine do not count.
"""
from __future__ import annotations

import time

import pytest

from services.markdown_bounds import BLOCK_MAX_LINES, RENDER_MAX_BLOCKS, RENDER_MAX_CHARS
from services.sanitize import render_markdown, sanitize_html


def _blocks(unit: str, size: int, block: int = 8_000) -> str:
    """`unit` repeated to about `size` characters, in blocks of about `block` characters
    separated by blank lines (under every per-block limit)."""
    per_block = max(1, block // len(unit))
    count = max(1, size // (per_block * len(unit)))
    return "\n\n".join(unit * per_block for _ in range(count))


ADVERSARIAL = {
    "unclosed <a": lambda size: "<a " * (size // 3),
    "unclosed <a on lines": lambda size: "text <a \n" * (size // 9),
    "runs of <": lambda size: "<" * size,
    "< and spaces": lambda size: "< " * (size // 2),
    "unclosed quoted attributes": lambda size: '<p title="' * (size // 10),
    "backtick runs": lambda size: _blocks("``a`", size),
    "setext headings": lambda size: _blocks("x\n=\n", size, block=1_500),
    "headings with pipes": lambda size: _blocks("# x |\n", size, block=2_000),
    "rules": lambda size: _blocks("---\n", size, block=1_500),
    "open brackets then parens": lambda size: _blocks("[" * 200 + "x" + "(" * 7_000, size),
    "runs of (": lambda size: _blocks("(", size),
    "hyphenated words": lambda size: _blocks("a-", size),
    "entities": lambda size: "&amp" * (size // 4),
    "flat links": lambda size: _blocks("[x](https://example.org/a) ", size),
    "flat tags": lambda size: _blocks("<b>x</b>", size),
    "empty paragraphs": lambda size: "x\n\n" * (size // 3),
    "quotes": lambda size: _blocks("> x\n", size, block=1_500),
}
PROSE = "The probe reads layer 12 and reports accuracy on the held-out split. "


def _cpu(call, text: str) -> float:
    best = float("inf")
    for _ in range(2):
        started = time.process_time()
        call(text)
        best = min(best, time.process_time() - started)
    return best


@pytest.fixture(scope="module")
def prose_seconds():
    """The time 200 KB of ordinary prose in paragraphs takes: the yardstick."""
    text = _blocks(PROSE, 200_000, block=1_000)
    render_markdown(text)  # warm up
    return _cpu(render_markdown, text)


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_rendering_hostile_markdown_is_linear_and_bounded(name, prose_seconds):
    """Does four times as much of each hostile shape take under six times as long to render,
    and 200 KB of it at most forty times as long as 200 KB of prose?"""
    make = ADVERSARIAL[name]
    small, large = make(50_000), make(200_000)
    assert 3.5 < len(large) / len(small) < 4.5
    render_markdown(small)  # warm up
    small_seconds, large_seconds = _cpu(render_markdown, small), _cpu(render_markdown, large)
    assert large_seconds < 6 * max(small_seconds, 0.02), (small_seconds, large_seconds)
    assert large_seconds < 40 * max(prose_seconds, 0.05), (prose_seconds, large_seconds)


@pytest.mark.parametrize("document", ["&lt; " * 40_000, "<b>x</b> " * 20_000, "(" * 100_000 + " https://example.org"])
def test_sanitizing_flat_markup_is_linear(document):
    """Is sanitizing flat HTML (entities, sibling tags, a run of `(` before an address) linear:
    four times the text in under six times the time?"""
    quarter = document[: len(document) // 4]
    sanitize_html(quarter)
    small, large = _cpu(sanitize_html, quarter), _cpu(sanitize_html, document)
    assert large < 6 * max(small, 0.02), (small, large)


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
