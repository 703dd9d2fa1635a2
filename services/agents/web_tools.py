"""Web research for the agents: the Messages API's server-side web search
and web fetch tools, the owner's switch and allowed-domains list, and the cited sources.

They are *server tools*: the API runs the search or the fetch inside the model call and
returns `server_tool_use` and `web_search_tool_result` / `web_fetch_tool_result` blocks in
the assistant turn; Sagan runs nothing and sends no tool_result. The loop stores those
blocks as returned and sends them back unchanged (a search result's `encrypted_content`
and a citation's `encrypted_index` are opaque and must not change).

Looked up 2026-12-01 (platform.claude.com "Web search tool", "Web fetch tool", "Server
tools" and the installed SDK, anthropic 2.14.0, whose non-beta tool union holds both):
- The versions used are the basic ones, `web_search_20250305` and `web_fetch_20250910`.
  Newer versions exist (`web_search_20260209`/`_20260318`, `web_fetch_20260209`/
  `_20260309`/`_20260318`); what they add is "dynamic filtering", in which the model runs
  code on the results through the code-execution tool. Sagan's agents do not need it,
  and the basic versions run no code and keep Zero Data Retention eligibility. Web fetch
  is in the GA tool union now; the `web-fetch-2025-09-10` beta header is not needed.
- `allowed_domains`: no scheme (`example.com`, not `https://example.com`), subdomains
  included, a sub-path allowed (`example.com/blog`). An empty list is a 400 ("Empty list
  of domains is ambiguous"), so an empty setting sends no `allowed_domains` at all.
- `max_uses` bounds the searches (fetches) of one request; past it the result block is an
  error with `max_uses_exceeded`.
- Web search costs $10 per 1,000 searches plus the tokens of the results, counted in
  `usage.server_tool_use.web_search_requests`; web fetch costs only its tokens.
- Citations arrive on text blocks, type `web_search_result_location` (url, title,
  cited_text, encrypted_index).
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import current_app

from services.claude import model_catalog
from services.core import settings
from services.core.errors import ValidationError
from services.planning import plans

SEARCH = "web_search"
FETCH = "web_fetch"
TOOL_TYPES = {SEARCH: "web_search_20250305", FETCH: "web_fetch_20250910"}
WEB_SEARCH_USD = model_catalog.WEB_SEARCH_USD  # per search (the pricing above; one table of prices)

ENABLED_SETTING = "web_tools_enabled"
DOMAINS_SETTING = "web_allowed_domains"
MAX_DOMAINS = 100
# A host name (labels of letters, digits and hyphens, a dot between them), then an
# optional path without spaces, quotes or a query.
_DOMAIN = re.compile(r"(?=.{1,253}(?:/|$))(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}"
                     r"(?:/[A-Za-z0-9._~%!$&*+,;=:@/-]*)?")

SOURCES_HEADING = "Sources"
# Result blocks of the server tools → the tool they answer.
RESULT_BLOCKS = {"web_search_tool_result": SEARCH, "web_fetch_tool_result": FETCH}
# Citations of a document (a fetched page is one): they name it by title and index.
DOCUMENT_CITATIONS = ("char_location", "page_location", "content_block_location")


# --- the owner's settings ---------------------------------------------------------------------

def enabled() -> bool:
    """Are the web tools offered to the agents that list them? On unless the owner turned
    them off (and an agent only runs with a model key configured)."""
    value = settings.get(ENABLED_SETTING)
    return True if value is None else bool(value)


def allowed_domains() -> list[str]:
    return [d for d in settings.get(DOMAINS_SETTING) or [] if isinstance(d, str)]


def clean_domains(raw: str) -> list[str]:
    """Domains from the Settings form (commas, spaces or lines), checked; raises
    ValidationError naming the first bad one. Empty: every domain."""
    domains: list[str] = []
    for entry in re.split(r"[\s,]+", raw or ""):
        if not entry:
            continue
        shown = entry[:80]
        if "://" in entry:
            raise ValidationError(f"{shown!r}: give the domain without the scheme (example.org, not "
                                  "https://example.org).", field=DOMAINS_SETTING)
        domain = entry.lower() if "/" not in entry else entry.split("/", 1)[0].lower() + "/" + entry.split("/", 1)[1]
        if domain.startswith("*."):
            raise ValidationError(f"{shown!r}: no wildcards — a domain already includes its subdomains "
                                  "(example.org covers docs.example.org).", field=DOMAINS_SETTING)
        if not _DOMAIN.fullmatch(domain):
            raise ValidationError(f"{shown!r} is not a domain (like arxiv.org or example.org/blog).",
                                  field=DOMAINS_SETTING)
        if domain not in domains:
            domains.append(domain)
    if len(domains) > MAX_DOMAINS:
        raise ValidationError(f"At most {MAX_DOMAINS} allowed domains; got {len(domains)}.", field=DOMAINS_SETTING)
    return domains


def update(form) -> None:
    """Store the switch and the allowed domains from the Settings form; the domains are
    checked first, so a bad one changes neither. The caller commits."""
    domains = clean_domains(form.get(DOMAINS_SETTING, ""))
    settings.put(ENABLED_SETTING, form.get(ENABLED_SETTING) == "1")
    settings.put(DOMAINS_SETTING, domains)


# --- the request ----------------------------------------------------------------------------

def definition(name: str) -> dict:
    """The server tool's entry in the request's `tools`."""
    entry = {"type": TOOL_TYPES[name], "name": name, "max_uses": max(1, int(current_app.config["WEB_TOOLS_MAX_USES"]))}
    domains = allowed_domains()
    if domains:  # an empty list is refused by the API; no list means every domain
        entry["allowed_domains"] = domains
    if name == FETCH:
        entry["citations"] = {"enabled": True}  # off by default for fetched pages
    return entry


def request_tools(names) -> list[dict]:
    """The server tools among `names` as request entries; none when the owner turned them off."""
    if not enabled():
        return []
    return [definition(name) for name in names if name in TOOL_TYPES]


# --- cited sources ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    url: str
    title: str
    cited_text: str


def safe_url(url) -> str | None:
    """The URL when it is http(s) with a host, else None (a `javascript:` citation is dropped)."""
    if not isinstance(url, str) or any(c in url for c in "\x00\r\n\t <>\"'`\\"):
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return url.strip()


def _fetched_pages(conversation) -> dict[str, str]:
    """Title → URL of every page web fetch returned in the run (first one per title)."""
    pages: dict[str, str] = {}
    for message in conversation or []:
        for block in message.get("content") if message.get("role") == "assistant" and \
                isinstance(message.get("content"), list) else []:
            result = block.get("content") if block.get("type") == "web_fetch_tool_result" else None
            if isinstance(result, dict) and result.get("type") == "web_fetch_result":
                title = ((result.get("content") or {}).get("title") or "").strip()
                if title and result.get("url"):
                    pages.setdefault(title, result["url"])
    return pages


def sources(conversation) -> list[Source]:
    """Every web page the model cited in the run's assistant turns, first citation first,
    one per URL; anything but an http(s) URL is dropped. Search citations carry their URL;
    a citation of a fetched page (char/page/content-block location) names the document by
    title, matched to the page web fetch returned under that title."""
    found: dict[str, Source] = {}
    fetched = _fetched_pages(conversation)
    for message in conversation or []:
        if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            if block.get("type") != "text":
                continue
            for citation in block.get("citations") or []:
                if citation.get("type") == "web_search_result_location":
                    url, title = citation.get("url"), citation.get("title")
                elif citation.get("type") in DOCUMENT_CITATIONS:
                    title = (citation.get("document_title") or "").strip()
                    url = fetched.get(title)
                else:
                    continue
                url = safe_url(url)
                if url is None or url in found:
                    continue
                title = " ".join(str(title or url).split())
                found[url] = Source(url, title[:300], " ".join(str(citation.get("cited_text") or "").split())[:300])
    return list(found.values())


def _new(text: str, cited: list[Source]) -> list[Source]:
    """The sources whose URL the text does not already hold (as written, or HTML-escaped as
    the sanitizer stores it: a clean result sent back with its Sources gets no second list)."""
    return [s for s in cited if s.url not in text and html.escape(s.url) not in text]


def _markdown_text(value: str) -> str:
    """Plain text for a markdown line: characters that make links or HTML escaped."""
    return re.sub(r"([\\`*_\[\]()<>#!|])", r"\\\1", value)


def with_markdown_sources(markdown: str, cited: list[Source]) -> str:
    """A plan with a Sources section listing the cited pages it does not already link, before
    its runpod-spec block (the sanitizer renders it like the rest: links only for http(s))."""
    new = _new(markdown or "", cited)
    if not new:
        return markdown
    lines = [f"- [{_markdown_text(s.title)}](<{s.url}>)" + (f" — “{_markdown_text(s.cited_text)}”" if s.cited_text else "")
             for s in new]
    return plans.add_section(markdown, SOURCES_HEADING, "\n".join(lines))


def with_html_sources(body: str, cited: list[Source]) -> str:
    """A clean result's HTML with a Sources section of the cited pages it does not already
    link; it is sanitized with the body when stored."""
    new = _new(body or "", cited)
    if not new:
        return body
    items = "".join(f'<li><a href="{html.escape(s.url)}">{html.escape(s.title)}</a>'
                    + (f" — “{html.escape(s.cited_text)}”" if s.cited_text else "") + "</li>" for s in new)
    return f'{body or ""}<section id="sources"><h2>{SOURCES_HEADING}</h2><ol>{items}</ol></section>'


def with_text_sources(text: str, cited: list[Source]) -> str:
    """A run's final words (shown as plain text on the run page) with the pages they cite."""
    new = _new(text or "", cited)
    if not new:
        return text
    return f"{(text or '').rstrip()}\n\n{SOURCES_HEADING}:\n" + "\n".join(f"- {s.title} <{s.url}>" for s in new)


def describe_result(block: dict) -> tuple[str, bool]:
    """(one line per result, is it an error) for a server tool's result block on the run page."""
    content = block.get("content")
    if isinstance(content, dict) and str(content.get("type", "")).endswith("_error"):
        return f"{RESULT_BLOCKS.get(block.get('type'), 'web tool')} failed: {content.get('error_code')}", True
    if isinstance(content, dict):  # a fetched page
        document = content.get("content") or {}
        return f"Fetched {document.get('title') or ''} <{content.get('url')}>".replace("  ", " "), False
    lines = [f"- {r.get('title') or r.get('url')} <{r.get('url')}>" for r in content or [] if isinstance(r, dict)]
    return f"{len(lines)} result(s)\n" + "\n".join(lines), False
