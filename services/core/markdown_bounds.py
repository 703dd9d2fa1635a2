"""Markdown to HTML in time linear in the text, for the one sanitizer (services.core.sanitize).

Python-Markdown is quadratic on several shapes of hostile text; each was measured and is
neutralised here, before or inside the renderer, without changing what ordinary text
renders to:

- an unclosed `<` (`<a <a <a …`): the raw-HTML parser rescans to the end of the text from
  each one. A `<` that no `>` closes before the next `<` cannot start a tag anyway, so it is
  set aside as a sentinel and comes back as `&lt;` after rendering (an HTML comment is kept
  whole when it is closed);
- backtick runs of differing lengths (``` ``a` ``` repeated): each opener scanned the rest of
  the paragraph for a closing run of its length. The scan is limited to CODE_SPAN_MAX_CHARS;
- `[` with no closing `]` (link text) and `(` with no closing `)` (link target): each was
  scanned to the end of the paragraph. Link text and targets are limited to LINK_MAX_CHARS;
- a block (text between blank lines) of many short lines that each end it (`x\\n=\\n`,
  `---`, `# x`): the block parser re-tests the rest of the block after each line, so its
  cost is lines × length. A block past BLOCK_MAX_CHARS or BLOCK_MAX_LINES, or with more than
  BLOCK_MAX_BRACKETS `[`, is shown verbatim as code, and the table test reads only a
  block's first two lines.

Text past RENDER_MAX_CHARS characters or RENDER_MAX_BLOCKS blocks is not rendered at all: it
is shown as escaped, preformatted text.
"""
from __future__ import annotations

import re
from html import escape

import markdown as markdown_lib

# The most text rendered as markdown; the rest of a longer text is shown verbatim. Plans
# are refused past MARKDOWN_MAX bytes (200,000) and comments past 20,000 characters before
# they get here, so this is the bound for anything that reaches the renderer another way.
RENDER_MAX_CHARS = 200_000
# The most blocks (text between blank lines) rendered; later ones are shown verbatim too.
RENDER_MAX_BLOCKS = 2_000
# A block (text between blank lines) past either limit is shown as code. Legitimate
# paragraphs, lists and tables are far smaller; the block parser's cost grows with
# lines × characters within one block.
BLOCK_MAX_CHARS = 20_000
BLOCK_MAX_LINES = 400
BLOCK_MAX_BRACKETS = 256
# How far a link's text (`[…]`) and target (`(…)`) may reach, and a code span.
LINK_MAX_CHARS = 2_000
CODE_SPAN_MAX_CHARS = 20_000

EXTENSIONS = ["extra", "sane_lists", "nl2br"]

# A noncharacter stands in for each `<` that cannot start a tag; it never occurs in text
# that reaches the renderer (any in the input is replaced first).
_LT = "\ufdd0"
_BLOCK_SPLIT = re.compile(r"(\n[ \t]*\n)")
_BRACKETS = re.compile(r"[\[\]]")


def render(text: str) -> str:
    """Markdown to (unsanitized) HTML, linear in len(text). The caller sanitizes."""
    text = text.replace(_LT, "\ufffd").replace("\r\n", "\n").replace("\r", "\n")
    rest = ""
    if len(text) > RENDER_MAX_CHARS:
        text, rest = text[:RENDER_MAX_CHARS], text[RENDER_MAX_CHARS:]
    parts = _BLOCK_SPLIT.split(text)
    if len(parts) > 2 * RENDER_MAX_BLOCKS:
        # Past this many blocks the text is shown verbatim: each block costs the renderer and
        # the sanitizer a fixed amount, and the block list is shifted once per block.
        rest = "".join(parts[2 * RENDER_MAX_BLOCKS:]) + rest
        parts = parts[:2 * RENDER_MAX_BLOCKS - 1]
    source = _verbatim_oversized_blocks(_set_aside_unclosed_angles("".join(parts)))
    html = _renderer().convert(source).replace(_LT, "&lt;")
    if rest:
        html += f'\n<pre class="verbatim"><code>{escape(rest, quote=False)}</code></pre>'
    return html


def _set_aside_unclosed_angles(text: str) -> str:
    """Each `<` that no `>` closes before the next `<` becomes the sentinel; an HTML comment
    closed by `-->` is kept whole. One pass: every step moves past what it read."""
    if "<" not in text:
        return text
    out = []
    position = 0
    comments_close = True  # until a `<!--` finds no `-->`, after which none can
    while (start := text.find("<", position)) >= 0:
        out.append(text[position:start])
        if comments_close and text.startswith("<!--", start):
            end = text.find("-->", start + 4)
            if end >= 0:
                out.append(text[start:end + 3])
                position = end + 3
                continue
            comments_close = False
        following = text.find("<", start + 1)
        closing = text.find(">", start + 1, following if following >= 0 else len(text))
        out.append("<" if closing >= 0 else _LT)
        position = start + 1
    out.append(text[position:])
    return "".join(out)


def _verbatim_oversized_blocks(text: str) -> str:
    parts = _BLOCK_SPLIT.split(text)
    for index in range(0, len(parts), 2):
        block = parts[index]
        if len(block) > BLOCK_MAX_CHARS or block.count("\n") >= BLOCK_MAX_LINES \
                or block.count("[") > BLOCK_MAX_BRACKETS:
            parts[index] = "\n".join("    " + line for line in block.split("\n"))
    return "".join(parts)


def _renderer() -> markdown_lib.Markdown:
    """A fresh Markdown instance (they keep per-document state) with the bounded scans."""
    md = markdown_lib.Markdown(extensions=EXTENSIONS, output_format="html")
    for name in ("reference", "link", "image_link", "image_reference", "short_reference", "short_image_ref"):
        if name in md.inlinePatterns:
            _bound_link_scans(md.inlinePatterns[name])
    if "backtick" in md.inlinePatterns:
        _bound_code_spans(md.inlinePatterns["backtick"])
    if "table" in md.parser.blockprocessors:
        _cheap_table_test(md.parser.blockprocessors["table"])
    return md


def _bound_link_scans(processor) -> None:
    """Link text and target scans stop LINK_MAX_CHARS past where they start: a longer one is
    not a link (its `[` stays text).

    The link text's closing `]` is found by visiting only the brackets (Python-Markdown
    visits every character in a Python loop: 200 `[` before long text cost 0.8 s per 40 KB).
    Same answer: the first `]` that closes as many `[` as were opened after the first.
    """
    get_link = processor.getLink

    def bounded_text(data, index):
        end = min(len(data), index + LINK_MAX_CHARS)
        depth = 1
        for bracket in _BRACKETS.finditer(data, index, end):
            depth += 1 if bracket.group() == "[" else -1
            if depth == 0:
                return data[index:bracket.start()], bracket.end(), True
        return data[index:end], end, False

    def bounded_link(data, index):
        return get_link(data[:index + LINK_MAX_CHARS], index)

    processor.getText, processor.getLink = bounded_text, bounded_link


def _bound_code_spans(processor) -> None:
    """Code spans found with C-speed searches instead of a character loop per opener.

    Same pairing as Python-Markdown's: the first later run of as many backticks closes the
    span; failing that, when no later run is longer than the opener, the first of the
    longest shorter runs does (and the opener's extra backticks stay text). Runs are looked
    for within CODE_SPAN_MAX_CHARS, and an opener of more than CODE_SPAN_MAX_TICKS backticks
    opens nothing.
    """
    def find(start, text):
        opener = _BACKTICKS.match(text, start)
        ticks = opener.end() - start
        begin = opener.end()
        if ticks > CODE_SPAN_MAX_TICKS:
            return begin, None
        window = text[:begin + CODE_SPAN_MAX_CHARS]
        closing = _run_of(ticks).search(window, begin)
        if closing:
            return begin, closing.start()
        if re.compile("`" * (ticks + 1)).search(window, begin):
            return begin, None
        for shorter in range(ticks - 1, 0, -1):
            closing = _run_of(shorter).search(window, begin)
            if closing:
                return begin - (ticks - shorter), closing.start()
        return begin, None

    processor.find_code_spans = find


_BACKTICKS = re.compile("`*")
CODE_SPAN_MAX_TICKS = 16


def _run_of(count: int) -> re.Pattern:
    """A run of exactly `count` backticks."""
    return re.compile(f"(?<!`){'`' * count}(?!`)")


def _cheap_table_test(processor) -> None:
    """The table test on the block's first two lines only.

    Python-Markdown's test strips every line of the block, and runs again on the rest of the
    block after each line another processor takes (a heading, a rule): lines × length. Its
    answer depends on the header and separator rows, except that a one-column table also
    needed every later row to carry a `|`; here, as in GitHub's tables, the header and
    separator rows decide, and a later row without a `|` is a one-cell row.
    """
    test = processor.test

    def cheap(parent, block):
        first_break = block.find("\n")
        if first_break < 0:
            return False  # one line is never a table
        second_break = block.find("\n", first_break + 1)
        return test(parent, block if second_break < 0 else block[:second_break])

    processor.test = cheap
