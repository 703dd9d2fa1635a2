"""Where a literature item's metadata comes from: the arXiv API (Atom), Crossref (JSON) and
Semantic Scholar's Graph API (JSON), and the identifiers that choose between them.

Every request goes through `fetch`, which applies the outbound rule (services/core/outbound.py):
the host is resolved, checked and connected to by that address, redirects are followed by
hand and each hop checked again, and a body is read only up to MAX_BODY_BYTES. A source that
is offline, refuses or knows nothing raises LookupFailed with a sentence for the owner and
whatever was known (the identifier itself), so the form can be shown prefilled.
"""
from __future__ import annotations

import re
import unicodedata
from urllib.parse import parse_qs, quote, urljoin, urlsplit, urlunsplit

import feedparser
import httpx
from flask import current_app

from services.core.errors import Unprocessable
from services.core.outbound import OutboundRefused, check_outbound_url, resolve_allowed

TIMEOUT_SECONDS = 20
MAX_BODY_BYTES = 10_000_000
MAX_REDIRECTS = 3
USER_AGENT = "Sagan-literature/1.0"

# New-style arXiv ids (2007-): YYMM.NNNN or YYMM.NNNNN; old style: archive(.SUB)/YYMMNNN.
_ARXIV_NEW = r"\d{4}\.\d{4,5}"
_ARXIV_OLD = r"[a-z-]+(?:\.[A-Z]{2})?/\d{7}"
ARXIV_ID = re.compile(rf"(?:arxiv:)?(?P<id>{_ARXIV_NEW}|{_ARXIV_OLD})(?:v\d+)?", re.IGNORECASE)
DOI = re.compile(r"(?:doi:|https?://(?:dx\.)?doi\.org/)?(?P<doi>10\.\d{4,9}/\S+)", re.IGNORECASE)


class LookupFailed(Unprocessable):
    """A metadata source could not give this work: `known` holds what is known anyway
    (identifiers, URL) for the manual form."""

    code = "lookup_failed"

    def __init__(self, message: str, *, known: dict | None = None, retry_after: float | None = None,
                 missing: bool = False):
        super().__init__(message)
        self.known = known or {}
        self.missing = missing  # the source answered and knows no such work (not: it failed)
        if retry_after is not None:
            self.details["retryAfter"] = retry_after


def normalize_doi(raw: str | None) -> str | None:
    """A DOI as stored: lower-case (DOIs are case-insensitive), without a resolver prefix."""
    match = DOI.fullmatch((raw or "").strip())
    return match.group("doi").lower().rstrip(".") if match else None


def normalize_arxiv_id(raw: str | None) -> str | None:
    """An arXiv id as stored: without `arXiv:` and without the version, so v1 and v3 are one work."""
    match = ARXIV_ID.fullmatch((raw or "").strip())
    return match.group("id") if match else None


def match_key(title: str, authors: list[str]) -> str:
    """Normalized title + first author's surname: the same work arriving without identifiers
    (a BibTeX entry and a feed item) gets the same key whatever its case, accents or punctuation."""
    def fold(text: str) -> str:
        text = unicodedata.normalize("NFKD", text or "").encode("ascii", "ignore").decode().lower()
        # An apostrophe joins ("Müller's" is "mullers"); every other mark separates words.
        return re.sub(r"[^a-z0-9]+", " ", re.sub(r"['\u2019]", "", text)).strip()
    first = authors[0] if authors else ""
    # "Vaswani, Ashish" and "Ashish Vaswani" both name the surname Vaswani.
    surname = first.split(",")[0] if "," in first else (first.split() or [""])[-1]
    return f"{fold(title)[:300]}|{fold(surname)[:80]}"


def identify(text: str) -> tuple[str, str]:
    """What the owner pasted: ("arxiv", id) | ("doi", doi) | ("openreview", id) | ("url", url).
    ValidationError-free: anything else is reported by the caller."""
    text = (text or "").strip()
    if arxiv := normalize_arxiv_id(text):
        return "arxiv", arxiv
    if doi := normalize_doi(text):
        return "doi", doi
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and parts.hostname:
        host = parts.hostname.lower()
        if host.endswith("arxiv.org"):
            found = re.search(rf"/(?:abs|pdf)/({_ARXIV_NEW}|{_ARXIV_OLD})", parts.path)
            if found:
                return "arxiv", found.group(1)
        if host.endswith("openreview.net"):
            forum = parse_qs(parts.query).get("id")
            if forum:
                return "openreview", forum[0]
        return "url", text
    return "unknown", text


# --- HTTP ---------------------------------------------------------------------------------


def fetch(url: str, *, params: dict | None = None, headers: dict | None = None,
          schemes=("https", "http")) -> httpx.Response:
    """GET `url` under the outbound rule; redirects followed by hand, each hop checked.
    OutboundRefused / LookupFailed when it cannot be reached."""
    current = str(httpx.URL(url, params=params)) if params else url
    for _hop in range(MAX_REDIRECTS + 1):
        parts = urlsplit(current)
        if parts.scheme not in schemes or not parts.hostname:
            raise LookupFailed(f"{current[:200]} is not an http(s) URL.")
        address = resolve_allowed(parts.hostname)[0]
        literal = f"[{address}]" if ":" in address else address
        netloc = literal + (f":{parts.port}" if parts.port else "")
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        host_header = parts.hostname + (f":{parts.port}" if parts.port else "")
        try:
            with httpx.Client(trust_env=False, follow_redirects=False, timeout=TIMEOUT_SECONDS) as client:
                request = client.build_request("GET", pinned, headers={"Host": host_header, "User-Agent": USER_AGENT,
                                                                       **(headers or {})},
                                               extensions={"sni_hostname": parts.hostname})
                response = client.send(request, stream=True)
                try:
                    if response.is_redirect and response.headers.get("location"):
                        current = urljoin(current, response.headers["location"])
                        continue
                    body = bytearray()
                    for chunk in response.iter_bytes():
                        body.extend(chunk)
                        if len(body) > MAX_BODY_BYTES:
                            raise LookupFailed(f"{parts.hostname} sent more than {MAX_BODY_BYTES // 1_000_000} MB.")
                finally:
                    response.close()
        except httpx.TimeoutException:
            raise LookupFailed(f"{parts.hostname} did not answer within {TIMEOUT_SECONDS} s.") from None
        except httpx.TransportError as exc:
            raise LookupFailed(f"{parts.hostname} could not be reached ({type(exc).__name__}).") from None
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body),
                              request=response.request)
    raise LookupFailed(f"{urlsplit(url).hostname} redirected more than {MAX_REDIRECTS} times.")


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _refusal(source: str, response: httpx.Response, known: dict, what: str) -> LookupFailed:
    """The sentence for a source's non-200 answer."""
    if response.status_code == 404:
        return LookupFailed(f"{source} knows no {what}.", known=known, missing=True)
    if response.status_code == 429:
        wait = _retry_after(response)
        later = f" (it asks to wait {wait:g} s)" if wait is not None else ""
        return LookupFailed(f"{source} is limiting requests{later}; try again later or enter the details by hand.",
                            known=known, retry_after=wait)
    return LookupFailed(f"{source} answered {response.status_code}; enter the details by hand or try again later.",
                        known=known)


def _reach(source: str, url: str, known: dict, **kwargs) -> httpx.Response:
    try:
        return fetch(url, **kwargs)
    except OutboundRefused as exc:
        raise LookupFailed(f"{source}: {exc.message}", known=known) from None
    except LookupFailed as exc:
        raise LookupFailed(f"{source}: {exc.message} Enter the details by hand.", known=known) from None


# --- arXiv --------------------------------------------------------------------------------


def arxiv_entry_fields(entry) -> dict:
    """An arXiv Atom entry (as feedparser reads it) as item fields."""
    arxiv_id = normalize_arxiv_id((entry.get("id") or "").rsplit("/abs/", 1)[-1])
    doi = normalize_doi(entry.get("arxiv_doi"))
    published = entry.get("published_parsed")
    return {"title": _one_line(entry.get("title")), "authors": [a.get("name", "").strip() for a in
                                                               entry.get("authors", []) if a.get("name")],
            "year": published.tm_year if published else None, "abstract": _one_line(entry.get("summary")),
            "arxiv_id": arxiv_id, "doi": doi, "url": f"https://arxiv.org/abs/{arxiv_id}" if arxiv_id else
            entry.get("link", ""), "venue": _one_line(entry.get("arxiv_journal_ref")) or "arXiv",
            "type": "paper", "source": "arxiv"}


def parse_arxiv_feed(body: bytes):
    """The arXiv API's Atom answer, parsed; LookupFailed when it is not one (arXiv throttles
    with a plain-text `Rate exceeded.`) or carries arXiv's single `Error` entry."""
    parsed = feedparser.parse(body)
    if parsed.bozo and not parsed.entries and not parsed.feed.get("title"):
        raise LookupFailed("arXiv's answer was not an Atom feed" +
                           (f" ({body[:80].decode(errors='replace').strip()})." if body else "."))
    for entry in parsed.entries:
        if "/api/errors" in (entry.get("id") or ""):
            raise LookupFailed(f"arXiv refused the query: {_one_line(entry.get('summary'))}")
    return parsed


def lookup_arxiv(arxiv_id: str) -> dict:
    """arXiv's metadata for one id (any version: the newest is read)."""
    known = {"arxiv_id": arxiv_id, "url": f"https://arxiv.org/abs/{arxiv_id}", "source": "arxiv"}
    response = _reach("arXiv", current_app.config["SAGAN_ARXIV_API_URL"], known,
                      params={"id_list": arxiv_id, "max_results": "1"})
    if response.status_code != 200:
        raise _refusal("arXiv", response, known, f"paper {arxiv_id}")
    try:
        parsed = parse_arxiv_feed(response.content)
    except LookupFailed as exc:
        raise LookupFailed(exc.message, known=known) from None
    entries = [e for e in parsed.entries if normalize_arxiv_id((e.get("id") or "").rsplit("/abs/", 1)[-1])]
    if not entries:
        raise LookupFailed(f"arXiv knows no paper {arxiv_id}.", known=known, missing=True)
    return arxiv_entry_fields(entries[0])


# --- Crossref -----------------------------------------------------------------------------

_CROSSREF_TYPES = {"journal-article": "paper", "proceedings-article": "paper", "posted-content": "paper",
                   "book-chapter": "paper", "report": "report", "dataset": "other"}


def lookup_crossref(doi: str) -> dict:
    """Crossref's metadata for one DOI (`/works/{doi}`)."""
    known = {"doi": doi, "url": f"https://doi.org/{doi}"}
    base = current_app.config["SAGAN_CROSSREF_API_URL"].rstrip("/")
    response = _reach("Crossref", f"{base}/works/{quote(doi, safe='/')}", known)
    if response.status_code != 200:
        raise _refusal("Crossref", response, known, f"DOI {doi}")
    try:
        work = response.json()["message"]
        title = _one_line(" ".join(work.get("title") or []))
        authors = [" ".join(p for p in (a.get("given"), a.get("family")) if p) or a.get("name", "")
                   for a in work.get("author") or []]
        parts = ((work.get("issued") or {}).get("date-parts") or [[None]])[0]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        raise LookupFailed("Crossref's answer was not the JSON it documents; enter the details by hand.",
                           known=known) from None
    if not title:
        raise LookupFailed(f"Crossref has no title for DOI {doi}; enter the details by hand.", known=known)
    year = parts[0] if parts and isinstance(parts[0], int) else None
    return {"title": title, "authors": [a for a in authors if a], "year": year,
            "venue": _one_line(" ".join(work.get("container-title") or [])),
            "abstract": _strip_tags(work.get("abstract") or ""), "doi": normalize_doi(work.get("DOI")) or doi,
            "url": work.get("URL") or known["url"], "type": _CROSSREF_TYPES.get(work.get("type"), "paper"),
            "source": "manual"}


# --- Semantic Scholar ---------------------------------------------------------------------

S2_FIELDS = "title,authors,year,venue,abstract,externalIds,url"


def lookup_semantic_scholar(paper_id: str, *, known: dict | None = None) -> dict:
    """Semantic Scholar's metadata for a paper id it accepts (its own id, `DOI:…`, `ARXIV:…`, `URL:…`)."""
    known = known or {}
    base = current_app.config["SAGAN_SEMANTIC_SCHOLAR_API_URL"].rstrip("/")
    response = _reach("Semantic Scholar", f"{base}/paper/{quote(paper_id, safe=':/')}", known,
                      params={"fields": S2_FIELDS})
    if response.status_code != 200:
        raise _refusal("Semantic Scholar", response, known, "such paper")
    try:
        paper = response.json()
        ids = paper.get("externalIds") or {}
        fields = {"title": _one_line(paper.get("title")),
                  "authors": [a.get("name", "") for a in paper.get("authors") or [] if a.get("name")],
                  "year": paper.get("year") if isinstance(paper.get("year"), int) else None,
                  "venue": _one_line(paper.get("venue")), "abstract": (paper.get("abstract") or "").strip(),
                  "s2_id": paper.get("paperId"), "doi": normalize_doi(ids.get("DOI")),
                  "arxiv_id": normalize_arxiv_id(ids.get("ArXiv")), "url": paper.get("url") or known.get("url", ""),
                  "type": "paper", "source": "semantic_scholar"}
    except (ValueError, AttributeError, TypeError):
        raise LookupFailed("Semantic Scholar's answer was not the JSON it documents; enter the details by hand.",
                           known=known) from None
    if not fields["title"]:
        raise LookupFailed("Semantic Scholar has no title for that paper; enter the details by hand.", known=known)
    return fields


def lookup(text: str) -> dict:
    """Metadata for what the owner pasted: arXiv for an arXiv id, Crossref then Semantic
    Scholar for a DOI, Semantic Scholar for a URL. LookupFailed with what is known otherwise."""
    kind, value = identify(text)
    if kind == "arxiv":
        return lookup_arxiv(value)
    if kind == "doi":
        try:
            return lookup_crossref(value)
        except LookupFailed as crossref_failed:
            if not crossref_failed.missing:
                raise
            # A DOI Crossref does not register (DataCite's arXiv DOIs, for one) may be known to S2.
            try:
                return lookup_semantic_scholar(f"DOI:{value}", known=crossref_failed.known)
            except LookupFailed:
                raise crossref_failed from None
    if kind == "openreview":
        known = {"openreview_id": value, "url": text, "source": "openreview"}
        raise LookupFailed("OpenReview papers are entered by hand (no metadata source is configured for them).",
                           known=known)
    if kind == "url":
        try:
            check_outbound_url(text, schemes=("https", "http"))
        except OutboundRefused as exc:
            raise LookupFailed(exc.message, known={"url": text}) from None
        return lookup_semantic_scholar(f"URL:{text}", known={"url": text})
    raise LookupFailed("Paste an arXiv id (2401.01234), a DOI (10.1234/abcd) or a URL.", known={})


def _one_line(text: str | None) -> str:
    """arXiv hard-wraps titles and abstracts mid-sentence; one space instead of each run of whitespace."""
    return re.sub(r"\s+", " ", text or "").strip()


def _strip_tags(text: str) -> str:
    """Crossref abstracts are JATS XML (`<jats:p>`); the text without the tags."""
    return _one_line(re.sub(r"<[^>]+>", " ", text))
