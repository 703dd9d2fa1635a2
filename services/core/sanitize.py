"""The one sanitizing pipeline (SPEC §8.2): markdown → HTML → allowlist.

`render_markdown()`, `sanitize_html()` and `sanitize_result_html()` are the only producers
of markup that templates may mark safe. They run when text is written, and the sanitized
copy is what is stored and rendered — never sanitized on read.

Two allowlists (policies) share one engine:

- the dashboard policy (`sanitize_html`, `render_markdown`): notes, plans, comments — the
  output is shown inside dashboard pages, so no styles, no SVG, no ids;
- the result policy (`sanitize_result_html`): clean results and figures, shown only inside
  a sandboxed frame (templates/results/_frame.html) — adds an SVG subset, `<style>` whose
  contents are filtered as CSS (`filter_css`), and ids for in-result links.

The engine is bleach (html5lib) behind `_clean()`, so it can be swapped without touching
callers. Before bleach's allowlist runs, a pass over the parsed tree removes whole
elements whose content must not survive even as text (scripts, frames, SVG animation,
`<foreignObject>`…), drops namespaced attributes (`xlink:href`) and replaces each
`<style>`'s text with its filtered CSS: bleach only knows tags and attributes, and
would otherwise either keep `alert(1)` as text or escape CSS into garbage.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from xml.etree import ElementTree

import bleach
import tinycss2
from bleach import html5lib_shim
from bleach._vendor.html5lib import constants as html5lib_constants
from bleach._vendor.html5lib.constants import _ReparseException as ReparseException
from bleach._vendor.html5lib.constants import namespaces as HTML5_NAMESPACES
from bleach._vendor.html5lib.constants import voidElements
from bleach._vendor.html5lib.treewalkers.base import TreeWalker
from bleach.linkifier import TLDS, LinkifyFilter
from bleach.sanitizer import BleachSanitizerFilter

from flask import current_app

from services.core import markdown_bounds
from services.core.errors import ValidationError
from services.core.input_shape import has_visible_text
from services.core.redact import redact

SVG_NS = "http://www.w3.org/2000/svg"

# --- the dashboard policy ---------------------------------------------------------------

# Structural tags for notes, plans and comments. No forms, frames, scripts, styles,
# media or anything that loads from elsewhere.
ALLOWED_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt",
    "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
    "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub",
    "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul",
})
# No `id`: comments and notes are rendered inside dashboard pages, where an id could
# shadow one the page's htmx targets (`#status`, `#toasts`).
ALLOWED_ATTRIBUTES = {
    "*": ["title", "class", "lang", "dir"],
    "a": ["href", "title", "rel"],
    "img": ["src", "alt", "title", "width", "height"],
    "td": ["colspan", "rowspan", "align"], "th": ["colspan", "rowspan", "align", "scope"],
    "ol": ["start"], "details": ["open"], "code": ["class"],
}

# Elements removed together with everything inside them, in every policy: their content
# is code, a document of its own, or a way to load something.
DROP_WITH_CONTENT = frozenset({
    "script", "noscript", "template", "iframe", "frame", "frameset", "object", "embed",
    "applet", "param", "noembed", "noframes", "textarea", "select", "option", "button",
    "input", "form", "meta", "link", "base", "head", "audio", "video", "source", "track",
    "canvas", "portal", "xmp", "plaintext", "listing", "math", "dialog", "slot",
})

# --- the result policy (SPEC §8.2) -----------------------------------------------------------

RESULT_SVG_TAGS = frozenset({
    "svg", "g", "path", "rect", "circle", "line", "polyline", "polygon", "text", "tspan",
    "title", "defs", "clipPath", "linearGradient", "stop",
})
RESULT_HTML_TAGS = ALLOWED_TAGS | {
    "style", "section", "article", "header", "footer", "aside", "nav", "caption", "colgroup",
    "col", "time", "cite", "dfn", "var", "wbr", "main",
}
RESULT_ATTRIBUTES = {
    "*": ["title", "id", "class", "lang", "dir", "role", "aria-label", "aria-labelledby",
          "aria-describedby", "aria-hidden"],
    "a": ["href", "title", "rel", "target"],
    "img": ["src", "alt", "title", "width", "height"],
    "td": ["colspan", "rowspan", "align", "headers"], "th": ["colspan", "rowspan", "align", "scope", "headers"],
    "col": ["span"], "colgroup": ["span"], "ol": ["start", "reversed"], "details": ["open"],
    "time": ["datetime"], "table": ["summary"],
}
# Presentation attributes only: geometry, paint, text and gradient stops. Nothing that
# names a resource (href, xlink:href, src), animates, or runs (on*).
SVG_ATTRIBUTES = frozenset({
    "id", "class", "role", "aria-label", "aria-labelledby", "aria-describedby", "aria-hidden",
    "viewBox", "preserveAspectRatio", "width", "height", "x", "y", "x1", "y1", "x2", "y2",
    "cx", "cy", "r", "rx", "ry", "d", "points", "pathLength", "transform", "fill", "fill-opacity",
    "fill-rule", "clip-rule", "stroke", "stroke-width", "stroke-opacity", "stroke-dasharray",
    "stroke-dashoffset", "stroke-linecap", "stroke-linejoin", "stroke-miterlimit", "opacity",
    "color", "visibility", "display", "overflow", "shape-rendering", "text-rendering",
    "vector-effect", "paint-order", "clip-path", "clipPathUnits", "font-family", "font-size",
    "font-weight", "font-style", "font-variant", "letter-spacing", "word-spacing",
    "text-decoration", "text-anchor", "dominant-baseline", "alignment-baseline",
    "baseline-shift", "writing-mode", "dx", "dy", "rotate", "textLength", "lengthAdjust",
    "gradientUnits", "gradientTransform", "spreadMethod", "offset", "stop-color", "stop-opacity",
})

# The SVG presentation properties an element's inline `style` may set: kept as the same-named
# attribute (charting libraries write `style="fill: #fff; stroke: #000"` on every shape, and
# without it every shape is filled black: the figure becomes a black rectangle).
SVG_STYLE_PROPERTIES = frozenset({
    "fill", "fill-opacity", "fill-rule", "clip-rule", "stroke", "stroke-width", "stroke-opacity",
    "stroke-dasharray", "stroke-dashoffset", "stroke-linecap", "stroke-linejoin", "stroke-miterlimit",
    "opacity", "color", "visibility", "display", "shape-rendering", "text-rendering", "vector-effect",
    "paint-order", "clip-path", "font-family", "font-size", "font-weight", "font-style", "font-variant",
    "letter-spacing", "word-spacing", "text-decoration", "text-anchor", "dominant-baseline",
    "alignment-baseline", "baseline-shift", "writing-mode", "stop-color", "stop-opacity",
})

# `<img>` may carry inline images of these types; nothing else may use a data: URL.
IMAGE_DATA_PREFIXES = ("data:image/png;", "data:image/png,", "data:image/jpeg;", "data:image/jpeg,",
                       "data:image/svg+xml;", "data:image/svg+xml,")
LINK_PREFIXES = ("http://", "https://", "mailto:", "#")
# `#123` in text is a reference to experiment 123 (plans and results cite earlier work so);
# it becomes a link to the experiment's page, the one relative link the policies allow.
EXPERIMENT_REF = re.compile(r"(?<![\w&#/])#([1-9][0-9]{0,8})\b")
EXPERIMENT_HREF = re.compile(r"/experiments/([1-9][0-9]{0,8})")
EXPERIMENT_REF_CLASS = "experiment-ref"
_NO_REF_INSIDE = frozenset({"a", "pre", "code", "style", "kbd", "samp"})
LINK_REL = "noopener noreferrer nofollow"
# What the dashboard policy turns into a link in text: an address written with its scheme
# or `www.` (see _only_written_urls), with bleach's domain rule (a known top-level domain).
# bleach's own pattern may start at every position of a run of `(` or of `a-a-a…` and scan
# to the run's end from each, quadratic (8,000 `(` took 4 s); this one starts only at the
# first `(` of a run, or at a scheme or `www.` that does not continue a word, so each
# character is scanned from a bounded number of starts.
LINKIFY_URL = re.compile(
    r"(?:(?<!\()\(+|(?<![\w@.(/:-]))"
    r"(?:https?://(?:(?:\w+:)?\w+@)?|www\.)"
    r"(?:[\w-]+\.)+(?:" + "|".join(TLDS) + r")(?::[0-9]+)?(?!\.\w)\b"
    r"(?:[/?][^\s{}|\\^`<>\"]*)?",
    re.IGNORECASE)


@dataclass(frozen=True)
class Policy:
    """One allowlist: which elements, which attributes, whether `<style>` survives."""

    name: str
    tags: frozenset[str]
    attributes: dict[str, list[str]]
    svg_tags: frozenset[str] = frozenset()
    svg_attributes: frozenset[str] = frozenset()
    keep_style: bool = False
    ids: bool = False
    new_tab_links: bool = False
    linkify: bool = False
    # HTML elements whose text must go with them in this policy (a `<title>` outside SVG).
    drop_with_content: frozenset[str] = field(default_factory=frozenset)


DASHBOARD = Policy("dashboard", ALLOWED_TAGS, ALLOWED_ATTRIBUTES, linkify=True,
                   drop_with_content=DROP_WITH_CONTENT | {"style", "title"})
RESULT = Policy("result", RESULT_HTML_TAGS, RESULT_ATTRIBUTES, svg_tags=RESULT_SVG_TAGS,
                svg_attributes=SVG_ATTRIBUTES, keep_style=True, ids=True, new_tab_links=True,
                drop_with_content=DROP_WITH_CONTENT | {"title"})


# --- public functions ----------------------------------------------------------------------

def sanitize_html(html: str | None) -> str:
    """Allowlist-sanitize HTML from agents, pods or people, for showing in dashboard pages."""
    return _clean(html, DASHBOARD)


def sanitize_result_html(html: str | None) -> str:
    """Sanitize a clean result or figure (SVG subset, filtered `<style>`), for a sandboxed frame."""
    return _clean(html, RESULT)


def render_markdown(text: str | None) -> str:
    """Markdown (tables, fenced code, lists) to sanitized HTML, in time linear in the text
    (services.core.markdown_bounds says how each slow shape is kept linear)."""
    if not text:
        return ""
    check_markdown_nesting(text)
    return sanitize_html(markdown_bounds.render(text))


_MARKDOWN_NESTERS = re.compile(r"[ \t]*(?:>|[-*+][ \t]+|\d{1,9}[.)][ \t]+)")


def check_markdown_nesting(text: str) -> None:
    """Raise MarkupTooDeep for markdown whose quotes and lists nest deeper than the markup
    limit (Python-Markdown recurses per level and overflows the stack on deep lists)."""
    for line in text.split("\n"):
        depth, position = 0, 0
        while (found := _MARKDOWN_NESTERS.match(line, position)) and found.end() > position:
            depth += 1
            position = found.end()
            if depth > MAX_NESTING_DEPTH:
                raise MarkupTooDeep(f"The text nests quotes or lists more than {MAX_NESTING_DEPTH} levels "
                                    "deep; flatten it.", field="markdown")


def parse_fragment(html: str) -> ElementTree.Element:
    """Parse HTML the way the sanitizer does (html5lib); for readers such as the lint."""
    return _PARSER.parseFragment(html or "")


def local_name(tag) -> str:
    """`{http://www.w3.org/2000/svg}circle` → `circle`; HTML tags have no namespace."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def text_of(element: ElementTree.Element) -> str:
    """All text inside an element, whitespace collapsed."""
    return " ".join("".join(element.itertext()).split())


# --- CSS (SPEC §8.2: "<style> contents are filtered as CSS") ---------------------------------

# At-rules kept (their blocks are filtered in turn). Everything else goes: @import and
# @font-face load things, @namespace/@charset/@page/@keyframes are not needed in a write-up.
ALLOWED_AT_RULES = frozenset({"media", "supports", "container"})
# Functions that fetch (image-set, image, src, cross-fade), run script (IE's expression),
# or render other elements (element, paint).
BLOCKED_CSS_FUNCTIONS = frozenset({
    "expression", "image-set", "-webkit-image-set", "image", "element", "-moz-element", "paint",
    "cross-fade", "-webkit-cross-fade", "src",
})
# Properties that bind behaviour (old IE and Firefox).
BLOCKED_CSS_PROPERTIES = frozenset({"behavior", "-ms-behavior", "-moz-binding", "-webkit-binding"})
_CSS_NEVER = ("expression", "javascript:", "vbscript:", "behavior", "-moz-binding", "@import")
CSS_MAX_DEPTH = 3


def filter_css(text: str) -> str:
    """A stylesheet with only harmless rules left: no @import, remote url(), expression(),
    position: fixed, or binding properties. `<` is escaped so the text cannot end its
    `<style>` element."""
    rules = tinycss2.parse_stylesheet(text or "", skip_comments=True, skip_whitespace=True)
    return _escape_style_text(_filter_rules(rules, 0))


def filter_declarations(text) -> str:
    """One declaration block (`color: red; position: fixed`) with the unsafe ones dropped."""
    declarations = tinycss2.parse_blocks_contents(text, skip_comments=True, skip_whitespace=True)
    kept = []
    for declaration in declarations:
        if declaration.type != "declaration":
            continue  # nested rules and parse errors
        name = declaration.lower_name
        if name in BLOCKED_CSS_PROPERTIES or not _css_tokens_safe(declaration.value):
            continue
        value = tinycss2.serialize(declaration.value).strip()
        if not value or not _css_text_safe(value):
            continue
        if name == "position" and any(getattr(t, "lower_value", None) == "fixed" for t in declaration.value):
            continue  # a fixed box could cover the page it is shown in
        kept.append(f"{name}: {value}{' !important' if declaration.important else ''}")
    return "; ".join(kept)


def _filter_rules(rules, depth: int) -> str:
    parts = []
    for rule in rules:
        if rule.type == "qualified-rule":
            selector = tinycss2.serialize(rule.prelude).strip()
            body = filter_declarations(rule.content)
            if selector and body and _css_text_safe(selector):
                parts.append(f"{selector} {{ {body} }}")
        elif rule.type == "at-rule" and rule.lower_at_keyword in ALLOWED_AT_RULES \
                and rule.content is not None and depth < CSS_MAX_DEPTH:
            prelude = tinycss2.serialize(rule.prelude).strip()
            if not (_css_tokens_safe(rule.prelude) and _css_text_safe(prelude)):
                continue
            inner = _filter_rules(tinycss2.parse_rule_list(rule.content, skip_comments=True,
                                                           skip_whitespace=True), depth + 1)
            if inner:
                parts.append(f"@{rule.lower_at_keyword} {prelude} {{\n{inner}\n}}")
    return "\n".join(parts)


def _css_url_safe(url: str) -> bool:
    value = re.sub(r"[\s\x00-\x1f]+", "", url or "").lower()
    return value.startswith("#") or value.startswith(IMAGE_DATA_PREFIXES)


def _css_tokens_safe(tokens) -> bool:
    """No remote url(), no blocked function, anywhere in a token tree."""
    for token in tokens or ():
        kind = token.type
        if kind == "url" and not _css_url_safe(token.value):
            return False
        if kind == "at-keyword":
            return False
        if kind == "function":
            if token.lower_name in BLOCKED_CSS_FUNCTIONS:
                return False
            if token.lower_name == "url":
                strings = [t.value for t in token.arguments if t.type == "string"]
                if len(strings) != 1 or not _css_url_safe(strings[0]):
                    return False
            if not _css_tokens_safe(token.arguments):
                return False
        elif kind in ("() block", "[] block", "{} block"):
            if not _css_tokens_safe(token.content):
                return False
    return True


def _css_text_safe(text: str) -> bool:
    """The serialized text, squeezed of comments, escapes and space, names nothing dangerous.

    Belt and braces after the token walk: old IE read `expr/**/ession(` and `\\65xpression(`.
    """
    squeezed = re.sub(r"/\*.*?\*/|[\s\\]", "", text.lower())
    if any(word in squeezed for word in _CSS_NEVER):
        return False
    for match in re.finditer(r"url\(", squeezed):
        rest = squeezed[match.end():].lstrip("'\"")
        if not (rest.startswith("#") or rest.startswith(IMAGE_DATA_PREFIXES)):
            return False
    return True


def _escape_style_text(css: str) -> str:
    # `</style>` inside a string would end the element when the frame parses it.
    return css.replace("<", "\\3c ")


# --- the shape check ------------------------------------------------------

# Deep nesting is what made the parser slow (16k nested <div>s took 16–22 s), and no
# write-up needs more than a few dozen levels. Counted before parsing, in one pass.
MAX_NESTING_DEPTH = 100
# Elements whose end tag is optional (a new <p> or <li> closes the last): they never nest
# by being left open, so they are not counted. Void elements have no end tag at all.
_IMPLIED_END = frozenset({"p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "thead",
                          "tbody", "tfoot", "colgroup", "caption", "rb", "rt", "rtc", "rp"})
_TAG_NAME = re.compile(r"(/?)([A-Za-z][A-Za-z0-9:-]*)")
# Raw-text elements: what is inside is text, however tag-like.
_RAW_TEXT = frozenset({"script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
                       "noscript", "plaintext"})


class MarkupTooDeep(ValidationError):
    """Markup nested deeper than MAX_NESTING_DEPTH: refused before any parsing."""

    code = "markup_too_deep"


def nesting_depth(html: str) -> int:
    """How deep the markup's elements nest, counted over the raw text in linear time.

    Walks from `<` to `>` with str.find (never a regex that could rescan): each step moves
    past what it read, comments and raw-text elements are skipped whole, and an unclosed
    `<` or comment ends the scan. An over-estimate for markup that relies on the parser
    closing elements left open (`<b><i>` without end tags), which hostile documents do.
    """
    lowered = html.lower()
    open_tags: list[str] = []
    deepest = 0
    position = 0
    while (start := html.find("<", position)) >= 0:
        if html.startswith("<!--", start):
            end = html.find("-->", start + 4)
            if end < 0:
                break
            position = end + 3
            continue
        end = html.find(">", start + 1)
        if end < 0:
            break  # no tag can close any more: the rest is text
        position = end + 1
        found = _TAG_NAME.match(html, start + 1, end)
        if not found:
            continue  # <!doctype>, <?xml?>, "a < b"
        closing, name = found.group(1), found.group(2).lower()
        if closing:
            if name in open_tags:
                # Close back to the matching element, as a parser would for misnested tags.
                while open_tags and open_tags.pop() != name:
                    pass
            continue
        if name in _RAW_TEXT:
            close = lowered.find("</" + name, position)
            if close < 0:
                break
            position = close
            continue
        if name in voidElements or name in _IMPLIED_END or html[end - 1] == "/":
            continue
        open_tags.append(name)
        deepest = max(deepest, len(open_tags))
    return deepest


def check_nesting(html: str | None) -> None:
    """Raise MarkupTooDeep when `html` nests deeper than MAX_NESTING_DEPTH."""
    depth = nesting_depth(html or "")
    if depth > MAX_NESTING_DEPTH:
        raise MarkupTooDeep(f"The markup nests {depth:,} elements deep; the limit is {MAX_NESTING_DEPTH}. "
                            "Flatten it (a write-up rarely needs more than a few dozen levels).", field="html")


# --- the engine ---------------------------------------------------------------------------

_CLEANER_SHELL = bleach.Cleaner()  # only for its html5lib serializer
# Parses every tag (tags=None): the allowlist is applied to the tree, not by the tokenizer,
# which would otherwise turn unknown tags into escaped text before we could drop them.
_CHARACTERS = html5lib_constants.tokenTypes["Characters"]
_SPACE = html5lib_constants.tokenTypes["SpaceCharacters"]


class _MergingTokenizer(html5lib_shim.BleachHTMLTokenizer):
    """bleach's tokenizer, handing the parser each run of text as one token.

    The tree builder appends each text token to its element's text (`text += data`), so
    text arriving in many small tokens is quadratic: 50,000 `&lt;` took 3 s of copying.
    Adjacent tokens of one kind are always joined; spaces and other text are joined in the
    body phase only, where the parser treats them alike (in tables and column groups it
    does not). Text never changes the tokenizer's state, so holding it back until the
    next tag changes nothing the parser decides.
    """

    def __iter__(self):
        pending: list[str] = []
        kind = None
        for token in super().__iter__():
            token_type = token["type"]
            if token_type in (_CHARACTERS, _SPACE):
                if pending and (token_type == kind or self.parser.phase is self.parser.phases["inBody"]):
                    pending.append(token["data"])
                    if token_type == _CHARACTERS:
                        kind = _CHARACTERS
                    continue
                if pending:
                    yield {"type": kind, "data": "".join(pending)}
                pending, kind = [token["data"]], token_type
                continue
            if pending:
                yield {"type": kind, "data": "".join(pending)}
                pending = []
            yield token
        if pending:
            yield {"type": kind, "data": "".join(pending)}


class _LinearParser(html5lib_shim.BleachHTMLParser):
    """bleach's parser with the merging tokenizer."""

    def _parse(self, stream, innerHTML=False, container="div", scripting=True, **kwargs):
        self.innerHTMLMode, self.container, self.scripting = innerHTML, container, scripting
        self.tokenizer = _MergingTokenizer(stream=stream, consume_entities=self.consume_entities,
                                           parser=self, **kwargs)
        self.reset()
        try:
            self.mainLoop()
        except ReparseException:
            self.reset()
            self.mainLoop()


_PARSER = _LinearParser(tags=None, strip=True, consume_entities=False, namespaceHTMLElements=False)


def _clean(html: str | None, policy: Policy) -> str:
    if not html:
        return ""
    check_nesting(html)
    dom = _PARSER.parseFragment(html)
    styles = _prune(dom, policy)
    source = BleachSanitizerFilter(
        source=_LinearWalker(dom),
        allowed_tags=policy.tags | policy.svg_tags,
        attributes=_attribute_filter(policy),
        allowed_protocols=frozenset({"http", "https", "mailto", "data"}),
        strip_disallowed_tags=True, strip_html_comments=True,
    )
    if policy.linkify:
        source = LinkifyFilter(source, callbacks=[_only_written_urls, _set_rel], skip_tags=["pre", "code"],
                               url_re=LINKIFY_URL)
    source = _ExperimentRefs(source)
    source = _LinkAttributes(source, new_tab=policy.new_tab_links)
    out = _CLEANER_SHELL.serializer.render(source)
    if styles:
        # One pass for all placeholders: a replace per stylesheet would be quadratic.
        out = re.sub(r"saganstyle[0-9a-f]{16}n[0-9]+", lambda m: styles.get(m.group(0), m.group(0)), out)
    return out


class _LinearWalker(TreeWalker):
    """Tokens from the pruned tree, with an explicit stack.

    html5lib's own ElementTree walker finds a parent's place by scanning the parent's
    children (`list(parent).index(node)`) each time it climbs back up, which is quadratic
    in a wide document (5,000 sibling `<svg>`s took seconds). Same tokens, linear time.
    """

    def __iter__(self):
        root = self.tree
        if root.text:
            yield from self.text(root.text)
        stack = [("enter", child) for child in reversed(list(root))]
        while stack:
            action, element = stack.pop()
            if action == "tail":
                if element.tail:
                    yield from self.text(element.tail)
                continue
            if action == "end":
                yield self.endTag(*_split_name(element.tag))
                continue
            if not isinstance(element.tag, str):  # a comment
                yield self.comment(element.text or "")
                stack.append(("tail", element))
                continue
            namespace, name = _split_name(element.tag)
            attrs = {_split_name(key): value for key, value in element.attrib.items()}
            stack.append(("tail", element))
            if (namespace is None or namespace == HTML5_NAMESPACES["html"]) and name in voidElements:
                yield from self.emptyTag(namespace, name, attrs, bool(len(element) or element.text))
                continue
            yield self.startTag(namespace, name, attrs)
            if element.text:
                yield from self.text(element.text)
            stack.append(("end", element))
            stack.extend(("enter", child) for child in reversed(list(element)))


def _split_name(name: str) -> tuple[str | None, str]:
    """`{namespace}local` → (namespace, local); a plain name has no namespace."""
    if name.startswith("{"):
        namespace, local = name[1:].split("}", 1)
        return namespace, local
    return None, name


def _only_written_urls(attrs, new=False):
    """Link text that was written as an address (http://…, https://…, www.…), not any word
    ending in a country domain: `probe.py`, `train.sh` and `README.md` are file names."""
    if not new:
        return attrs
    text = str(attrs.get("_text", "")).lower()
    return attrs if text.startswith(("http://", "https://", "www.")) else None


def _set_rel(attrs, new=False):
    # Every link leaves the page without telling the target where it came from.
    attrs[(None, "rel")] = LINK_REL
    return attrs


class _LinkAttributes(html5lib_shim.Filter):
    """rel="noopener noreferrer nofollow" on every link; in results, open in a new tab
    (the frame's sandbox allows popups that escape it, never its own navigation away; an
    experiment link navigating the frame would load the dashboard inside the result)."""

    def __init__(self, source, new_tab: bool):
        super().__init__(source)
        self.new_tab = new_tab

    def __iter__(self):
        for token in super().__iter__():
            if token["type"] in ("StartTag", "EmptyTag") and token["name"] == "a" \
                    and token.get("namespace") in (None, html5lib_shim.namespaces["html"]):
                data = dict(token.get("data") or {})
                data[(None, "rel")] = LINK_REL
                if self.new_tab and (data.get((None, "href")) or "").startswith(("http", "mailto", "/experiments/")):
                    data[(None, "target")] = "_blank"
                else:
                    data.pop((None, "target"), None)
                token["data"] = data
            yield token


class _ExperimentRefs(html5lib_shim.Filter):
    """`#123` in text becomes `<a href="/experiments/123" class="experiment-ref">#123</a>`;
    not inside links, code or styles, and not in SVG (whose text cannot hold HTML links)."""

    def __iter__(self):
        skipping = 0  # depth inside elements whose text stays text
        for token in super().__iter__():
            kind = token["type"]
            foreign = token.get("namespace") not in (None, html5lib_shim.namespaces["html"])
            if kind == "StartTag" and (token["name"] in _NO_REF_INSIDE or foreign):
                skipping += 1
            elif kind == "EndTag" and (token["name"] in _NO_REF_INSIDE or foreign):
                skipping = max(skipping - 1, 0)
            elif kind == "Characters" and not skipping and "#" in token["data"]:
                yield from _split_refs(token["data"])
                continue
            yield token


def _split_refs(text: str):
    html_ns = html5lib_shim.namespaces["html"]
    position = 0
    for match in EXPERIMENT_REF.finditer(text):
        if match.start() > position:
            yield {"type": "Characters", "data": text[position:match.start()]}
        yield {"type": "StartTag", "name": "a", "namespace": html_ns,
               "data": {(None, "href"): f"/experiments/{match.group(1)}", (None, "class"): EXPERIMENT_REF_CLASS}}
        yield {"type": "Characters", "data": match.group(0)}
        yield {"type": "EndTag", "name": "a", "namespace": html_ns}
        position = match.end()
    if position < len(text):
        yield {"type": "Characters", "data": text[position:]}


def relink_experiment_refs(html: str | None, href_for) -> str:
    """Sanitized HTML with each link to an experiment (`/experiments/N`) pointed at
    `href_for(N)`, or turned back into plain text where that is None.

    For readers who cannot open the dashboard (a mentor on a share link): a link only to
    what they may see. Works on the stored, sanitized markup; changes nothing else.
    """
    if not html or "/experiments/" not in html:
        return html or ""
    dom = _PARSER.parseFragment(html)
    styles = _protect_styles(dom)
    for parent in list(dom.iter()):
        for child in list(parent):
            if not isinstance(child.tag, str) or local_name(child.tag) != "a" or child.tag.startswith("{"):
                continue
            found = EXPERIMENT_HREF.fullmatch(child.get("href") or "")
            if found is None:
                continue
            target = href_for(int(found.group(1)))
            if target:
                child.set("href", target)
                continue
            _unwrap(parent, child)
    out = _CLEANER_SHELL.serializer.render(_entities_kept(_LinearWalker(dom)))
    if styles:
        out = re.sub(r"saganstyle[0-9a-f]{16}n[0-9]+", lambda m: styles.get(m.group(0), m.group(0)), out)
    return out


def _entities_kept(tokens):
    """Tokens of stored markup, re-parsed, ready to serialize again. The parser leaves
    entities as written (`&amp;` stays five characters), and the serializer escapes every
    `&` in text: each entity becomes an Entity token, which it writes as it is (as bleach's
    own filter does), so `&amp;` is not shown to the reader as `&amp;amp;`."""
    for token in tokens:
        if token["type"] != "Characters" or "&" not in token["data"]:
            yield token
            continue
        for part in html5lib_shim.next_possible_entity(token["data"]):
            if not part:
                continue
            entity = html5lib_shim.match_entity(part) if part.startswith("&") else None
            if entity is None:
                yield {"type": "Characters", "data": part}
                continue
            yield {"type": "Entity", "name": entity}
            if len(part) > len(entity) + 2:
                yield {"type": "Characters", "data": part[len(entity) + 2:]}


# `arXiv:2401.01234` (any version) and `doi:10.1000/xyz` in text cite a work; where the
# library holds it, `link_citations` makes the citation a link to the item's page. Only the
# prefixed forms: a bare `2401.01234` is as likely a number as a paper. Each pattern starts
# at a fixed word that does not continue a word or path, so every character is scanned from
# a bounded number of starts.
CITATION = re.compile(
    r"(?<![\w/.:-])(?:arxiv:(?P<arxiv>\d{4}\.\d{4,5}|[a-z-]{1,20}(?:\.[a-z]{2})?/\d{7})(?:v\d{1,3})?(?![\w/])"
    r"|doi:(?P<doi>10\.\d{4,9}/[^\s<>\"']+))",
    re.IGNORECASE)
CITATION_HINT = re.compile(r"arxiv:|doi:", re.IGNORECASE)
CITATION_CLASS = "library-ref"
# A DOI may hold any character, but a sentence's closing punctuation is not part of one.
_DOI_TRAILING = ".,;:!?\u201d\u2019\u00bb"  # and the closing quotes a sentence may end with
_DOI_CLOSERS = {")": "(", "]": "["}


def citation_key(match: re.Match) -> tuple[str, str]:
    """("arxiv", id as written, without version) or ("doi", DOI as written), for a CITATION match."""
    if match.group("arxiv"):
        return "arxiv", match.group("arxiv")
    return "doi", _trim_doi(match.group("doi"))


def _trim_doi(doi: str) -> str:
    """Without trailing punctuation and unmatched closing brackets (`doi:10.1/a(1))` → `10.1/a(1)`),
    counted once, so a run of thousands of `)` is trimmed in one pass."""
    unmatched = {closer: doi.count(closer) - doi.count(opener) for closer, opener in _DOI_CLOSERS.items()}
    end = len(doi)
    while end:
        last = doi[end - 1]
        if last in _DOI_CLOSERS and unmatched[last] > 0:
            unmatched[last] -= 1
        elif last not in _DOI_TRAILING:
            break
        end -= 1
    return doi[:end]


def _citations_in(text: str):
    """(start, end, key) for each citation in a run of text; a DOI ends before closing punctuation."""
    for match in CITATION.finditer(text):
        kind, value = citation_key(match)
        start = match.start()
        end = match.end() if kind == "arxiv" else match.start("doi") + len(value)
        if value:
            yield start, end, (kind, value)


def link_citations(html: str | None, resolve, *, new_tab: bool = False) -> str:
    """Sanitized HTML with each citation of a work (`arXiv:…`, `doi:…`) that `resolve` knows
    made a link: `resolve(keys)` gets every citation key of the text at once (one lookup per
    text, however many citations) and answers {key: (href, title)} for the works it has.
    Not inside links, code, preformatted text, styles or SVG; nothing else changes.

    Runs when sanitized markup is shown (blueprints/filters.py), not when it is stored: the
    library changes after a plan cites a paper, and a share page must cite as plain text.
    """
    if not html or not CITATION_HINT.search(html):
        return html or ""
    dom = _PARSER.parseFragment(html)
    styles = _protect_styles(dom)
    tokens = []
    cited: set[tuple[str, str]] = set()
    skipping = 0  # depth inside elements whose text stays text
    for token in _LinearWalker(dom):
        kind = token["type"]
        foreign = token.get("namespace") not in (None, html5lib_shim.namespaces["html"])
        if kind == "StartTag" and (token["name"] in _NO_REF_INSIDE or foreign):
            skipping += 1
        elif kind == "EndTag" and (token["name"] in _NO_REF_INSIDE or foreign):
            skipping = max(skipping - 1, 0)
        elif kind == "Characters" and not skipping and CITATION_HINT.search(token["data"]):
            found = list(_citations_in(token["data"]))
            if found:
                cited.update(key for _start, _end, key in found)
                tokens.append({"type": "Citations", "data": token["data"], "found": found})
                continue
        tokens.append(token)
    if not cited:
        return html
    targets = resolve(cited) or {}
    if not targets:
        return html
    out = _CLEANER_SHELL.serializer.render(_entities_kept(_with_citation_links(tokens, targets, new_tab)))
    if styles:
        out = re.sub(r"saganstyle[0-9a-f]{16}n[0-9]+", lambda m: styles.get(m.group(0), m.group(0)), out)
    return out


def _with_citation_links(tokens, targets: dict, new_tab: bool):
    html_ns = html5lib_shim.namespaces["html"]
    for token in tokens:
        if token["type"] != "Citations":
            yield token
            continue
        text, position = token["data"], 0
        for start, end, key in token["found"]:
            target = targets.get(key)
            if target is None:
                continue
            href, title = target
            if start > position:
                yield {"type": "Characters", "data": text[position:start]}
            attributes = {(None, "href"): href, (None, "class"): CITATION_CLASS, (None, "title"): title or "",
                          (None, "rel"): LINK_REL}
            if new_tab:
                attributes[(None, "target")] = "_blank"
            yield {"type": "StartTag", "name": "a", "namespace": html_ns, "data": attributes}
            yield {"type": "Characters", "data": text[start:end]}
            yield {"type": "EndTag", "name": "a", "namespace": html_ns}
            position = end
        if position < len(text):
            yield {"type": "Characters", "data": text[position:]}


def experiment_refs(html: str | None) -> set[int]:
    """The experiment numbers sanitized HTML links to."""
    return {int(n) for n in re.findall(r'href="/experiments/([1-9][0-9]{0,8})"', html or "")}


def _protect_styles(dom: ElementTree.Element) -> dict[str, str]:
    """Stored `<style>` text through the serializer unchanged (it would escape `>`)."""
    styles = {}
    nonce = secrets.token_hex(8)
    for element in dom.iter():
        if isinstance(element.tag, str) and element.tag == "style" and element.text:
            placeholder = f"saganstyle{nonce}n{len(styles)}"
            styles[placeholder] = element.text
            element.text = placeholder
    return styles


def _unwrap(parent: ElementTree.Element, child: ElementTree.Element) -> None:
    """Replace an element by its text (links hold text only), keeping what follows it."""
    text = text_of(child) + (child.tail or "")
    siblings = list(parent)
    index = siblings.index(child)
    if index > 0:
        siblings[index - 1].tail = (siblings[index - 1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text
    parent.remove(child)


def _prune(root: ElementTree.Element, policy: Policy) -> dict[str, str]:
    """Remove dangerous subtrees and namespaced attributes; filter `<style>` text.

    Returns {placeholder: css}: each kept `<style>` holds a random placeholder through
    bleach (which would escape CSS as text) and gets its filtered CSS back afterwards.
    Iterative, so absurdly deep nesting cannot exhaust the stack.
    """
    styles: dict[str, str] = {}
    nonce = secrets.token_hex(8)
    stack = [root]
    while stack:
        parent = stack.pop()
        removed = []
        for child in list(parent):
            if not isinstance(child.tag, str):
                continue  # comments: bleach strips them
            namespace = child.tag[1:].split("}", 1)[0] if child.tag.startswith("{") else None
            name = local_name(child.tag)
            if namespace == SVG_NS:
                keep = name in policy.svg_tags
            elif namespace is None:
                keep = name not in policy.drop_with_content and not (name == "style" and not policy.keep_style)
            else:
                keep = False  # MathML and anything else foreign
            if not keep:
                removed.append(child)
                continue
            for key in list(child.attrib):
                lowered = key.lower()
                if key.startswith("{") or lowered.startswith(("on", "hx-", "data-hx-", "xmlns")):
                    del child.attrib[key]
            if namespace == SVG_NS and "style" in child.attrib:
                _style_to_presentation(child)
            if name == "style" and namespace is None:
                child.attrib.clear()  # css_hashes() expects a bare <style>
                css = filter_css("".join(child.itertext()))
                for grandchild in list(child):
                    child.remove(grandchild)
                if not css.strip():
                    removed.append(child)
                    continue
                placeholder = f"saganstyle{nonce}n{len(styles)}"
                styles[placeholder] = css
                child.text = placeholder
                continue
            stack.append(child)
        if removed:
            _remove_keeping_tails(parent, removed)
    return styles


def _style_to_presentation(element: ElementTree.Element) -> None:
    """An SVG element's inline `style` as presentation attributes (the style attribute itself
    never survives): only SVG_STYLE_PROPERTIES, only values the stylesheet filter would keep;
    the attribute filter then checks each like any other (url() inside the document only).
    A style declaration wins over the attribute of the same name, as it does in a browser."""
    for declaration in tinycss2.parse_blocks_contents(element.attrib.pop("style") or "", skip_comments=True,
                                                      skip_whitespace=True):
        if declaration.type != "declaration" or declaration.lower_name not in SVG_STYLE_PROPERTIES:
            continue
        if not _css_tokens_safe(declaration.value):
            continue
        value = tinycss2.serialize(declaration.value).strip()
        if value and _css_text_safe(value) and "<" not in value:
            element.attrib[declaration.lower_name] = value


def _remove_keeping_tails(parent: ElementTree.Element, removed: list[ElementTree.Element]) -> None:
    """Remove `removed` children of `parent` but keep the text after each (ElementTree
    stores it on the child), in one pass over the children: removing one at a time
    rescans them each time, quadratic for thousands of siblings."""
    gone = {id(child) for child in removed}
    kept: list[ElementTree.Element] = []
    for child in list(parent):
        if id(child) not in gone:
            kept.append(child)
            continue
        if child.tail:
            if kept:
                kept[-1].tail = (kept[-1].tail or "") + child.tail
            else:
                parent.text = (parent.text or "") + child.tail
    parent[:] = kept


def _normalized(value: str) -> str:
    """An attribute value as a browser would read a URL: no space, controls or case."""
    return re.sub(r"[`\x00-\x20\x7f-\xa0\s]+", "", value or "").lower()


def _attribute_filter(policy: Policy):
    def allowed(tag: str, name: str, value: str) -> bool:
        lowered = name.lower()
        if lowered.startswith(("on", "hx-", "data-hx-")) or lowered == "style":
            return False
        if tag in policy.svg_tags and tag not in policy.tags:
            permitted = name in policy.svg_attributes
        else:
            permitted = name in policy.attributes.get(tag, []) or name in policy.attributes["*"]
        if not permitted or (name == "id" and not policy.ids):
            return False
        normalized = _normalized(value)
        if any(word in normalized for word in ("javascript:", "vbscript:", "expression(", "livescript:")):
            return False
        if name == "href":
            return normalized.startswith(LINK_PREFIXES) or (tag == "a" and EXPERIMENT_HREF.fullmatch(value) is not None)
        if name == "src":
            # No remote loads: a result must not phone home when a mentor opens it.
            return tag == "img" and normalized.startswith(IMAGE_DATA_PREFIXES)
        if "url(" in normalized:
            # SVG paint and clip references may point inside the document only.
            return all(ref.startswith("#") for ref in re.findall(r"url\(['\"]?([^)'\"]*)", normalized))
        return True
    return allowed


def css_hashes(html: str | None) -> list[str]:
    """CSP hash sources ('sha256-…') for each `<style>` element of sanitized HTML.

    A srcdoc frame inherits the embedding page's Content-Security-Policy, so the page
    allows exactly these stylesheets (and no other inline style) — see
    front/security_headers.py.
    """
    import base64
    import hashlib
    found = []
    for match in re.finditer(r"<style>(.*?)</style>", html or "", flags=re.S):
        digest = hashlib.sha256(match.group(1).encode()).digest()
        found.append("'sha256-" + base64.b64encode(digest).decode() + "'")
    return found


def clean_markdown_document(raw, what: str, empty: str) -> str:
    """Owner-written markdown about to be stored as a version (a narrative, a weekly review):
    visible text, within MARKDOWN_MAX, nesting the renderer can take (checked before storing,
    not at the first reader), and secrets redacted. `what` names it in the refusal ("The
    review"), `empty` is the refusal for a blank text."""
    if not isinstance(raw, str) or not has_visible_text(raw):
        raise ValidationError(empty, field="body_md")
    body = raw.strip()
    limit = current_app.config["MARKDOWN_MAX"]
    if len(body) > limit:
        raise ValidationError(f"{what} is {len(body):,} characters; the limit is {limit:,}.", field="body_md")
    render_markdown(body)
    return redact(body)
