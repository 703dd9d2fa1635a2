"""The one sanitizing pipeline (SPEC §8.2): markdown → HTML → allowlist.

`render_markdown()` and `sanitize_html()` are the only producers of markup that templates
may mark safe. They run when text is written, and the sanitized copy is what is stored
and rendered — never sanitized on read. The clean-result issue extends the allowlist
(SVG subset, scoped <style>) behind the same functions.
"""
from __future__ import annotations

import bleach
import markdown as markdown_lib

# Structural tags for notes, plans and comments. No forms, frames, scripts, styles,
# media or anything that loads from elsewhere.
ALLOWED_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt",
    "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
    "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub",
    "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul",
})
ALLOWED_ATTRIBUTES = {
    "*": ["title", "id", "class", "lang", "dir"],
    "a": ["href", "title", "rel"],
    "img": ["src", "alt", "title", "width", "height"],
    "td": ["colspan", "rowspan", "align"], "th": ["colspan", "rowspan", "align", "scope"],
    "ol": ["start"], "details": ["open"], "code": ["class"],
}
ALLOWED_PROTOCOLS = frozenset({"http", "https", "mailto", "data"})  # data: only passes for <img>, below
_IMAGE_DATA_PREFIXES = ("data:image/png;", "data:image/jpeg;", "data:image/svg+xml;")

_MARKDOWN_EXTENSIONS = ["extra", "sane_lists", "nl2br"]


def _filter_attributes(tag: str, name: str, value: str) -> bool:
    """Allowlisted attributes only; `data:` URLs only for images of safe types."""
    # htmx attributes would let stored text make the dashboard send requests.
    if name.startswith(("hx-", "data-hx-", "on")):
        return False
    lowered = value.strip().lower()
    if tag == "img" and name == "src":
        # No remote loads: a result must not phone home when a mentor opens it.
        return lowered.startswith(_IMAGE_DATA_PREFIXES)
    if name == "href" and lowered.startswith("data:"):
        return False
    allowed = ALLOWED_ATTRIBUTES.get(tag, []) + ALLOWED_ATTRIBUTES["*"]
    return name in allowed


def _cleaner() -> bleach.Cleaner:
    return bleach.Cleaner(
        tags=ALLOWED_TAGS, attributes=_filter_attributes, protocols=ALLOWED_PROTOCOLS,
        strip=True, strip_comments=True,
        filters=[_link_filter()],
    )


def _link_filter():
    from bleach.linkifier import LinkifyFilter

    def set_rel(attrs, new=False):
        # Every link leaves the page without telling the target where it came from.
        attrs[(None, "rel")] = "noopener noreferrer nofollow"
        return attrs

    return lambda source: LinkifyFilter(source, callbacks=[set_rel], skip_tags=["pre", "code"])


_CLEANER = _cleaner()


def sanitize_html(html: str | None) -> str:
    """Allowlist-sanitize HTML from agents, pods or people."""
    if not html:
        return ""
    # Strip whole elements whose text must not survive as text either.
    return _CLEANER.clean(_drop_dangerous_elements(html))


def _drop_dangerous_elements(html: str) -> str:
    import re
    return re.sub(r"(?is)<(script|style|iframe|object|embed|template|noscript|textarea|title|svg|math)\b.*?</\1\s*>",
                  "", html)


def render_markdown(text: str | None) -> str:
    """Markdown (tables, fenced code, lists) to sanitized HTML."""
    if not text:
        return ""
    html = markdown_lib.markdown(text, extensions=_MARKDOWN_EXTENSIONS, output_format="html")
    return sanitize_html(html)
