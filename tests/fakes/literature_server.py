"""A loopback fake of the literature metadata sources, one server with a path prefix each:
`/arxiv/api/query`, `/crossref/works/{doi}`, `/s2/graph/v1/paper/{id}`, `/zotero/…` and
`/feeds/{name}` for RSS/Atom. What each follows (looked up 2026-12-02):

- arXiv API (info.arxiv.org/help/api/user-manual, and clients that parse it): `id_list` /
  `search_query` answer 200 with an Atom feed carrying `opensearch:totalResults`,
  `itemsPerPage`, `startIndex`; entry ids are `http://arxiv.org/abs/<id>v<N>`, titles and
  summaries hard-wrapped. A well-formed id arXiv does not have: 200, `totalResults` 0, no
  entry. A malformed parameter: 200 with one entry titled `Error` whose id is
  `http://arxiv.org/api/errors#…`. Throttling: the plain-text body `Rate exceeded.` (503).
- Crossref REST API (api.crossref.org, crossref.org "access and authentication"):
  `GET /works/{doi}` → `{"status": "ok", "message-type": "work", "message": {DOI, title: [..],
  author: [{given, family}], issued: {"date-parts": [[y, m, d]]}, container-title: [..],
  abstract (JATS XML), URL, type}}`; an unknown DOI → 404 with the plain-text body
  `Resource not found.`; over the rate limit → 429 with `Retry-After`.
- Semantic Scholar Graph API v1: `GET /paper/{id}?fields=…` where id is a paperId or
  `DOI:`, `ARXIV:`, `URL:`; → `{paperId, title, authors: [{authorId, name}], year, venue,
  abstract, externalIds: {DOI, ArXiv, …}, url}`; unknown → 404 `{"error": "Paper with id …
  not found"}`; throttled → 429 `{"message": "Too Many Requests…"}`.
- Zotero web API v3: `GET /users/{id}/items/top?format=json&limit=N&start=M` with
  `Zotero-API-Key`; a JSON array of `{key, version, data: {itemType, title, creators:
  [{creatorType, firstName, lastName} | {creatorType, name}], date, DOI, url, abstractNote,
  publicationTitle, tags: [{tag}], extra}}`, headers `Total-Results` and `Link: <…>;
  rel="next"` while more pages remain; a refused key → 403 `Forbidden`.
"""
from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

ATOM_HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom" '
             'xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom">\n'
             '<id>http://arxiv.org/api/fake</id><title type="html">ArXiv Query: {query}</title>'
             '<updated>2026-12-02T00:00:00-05:00</updated>\n'
             '<opensearch:totalResults>{total}</opensearch:totalResults>'
             '<opensearch:startIndex>0</opensearch:startIndex><opensearch:itemsPerPage>{per}</opensearch:itemsPerPage>\n')


def arxiv_entry(arxiv_id: str, title: str, authors: list[str], summary: str = "An abstract.",
                year: int = 2024, doi: str | None = None) -> str:
    names = "".join(f"<author><name>{escape(a)}</name></author>" for a in authors)
    doi_tag = f"<arxiv:doi>{escape(doi)}</arxiv:doi>" if doi else ""
    # arXiv hard-wraps titles: the newline in the middle is what the real API sends.
    wrapped = escape(title).replace(" ", "\n  ", 1)
    return (f"<entry><id>http://arxiv.org/abs/{arxiv_id}v2</id><updated>{year}-01-02T00:00:00Z</updated>"
            f"<published>{year}-01-01T00:00:00Z</published><title>{wrapped}</title>"
            f"<summary>  {escape(summary)}\n</summary>{names}{doi_tag}"
            f'<link href="http://arxiv.org/abs/{arxiv_id}v2" rel="alternate" type="text/html"/>'
            f'<arxiv:primary_category term="cs.LG" scheme="http://arxiv.org/schemas/atom"/></entry>\n')


@dataclass
class FakeLiterature:
    arxiv: dict = field(default_factory=dict)      # id → (title, authors, summary)
    crossref: dict = field(default_factory=dict)   # doi → message
    s2: dict = field(default_factory=dict)         # id → paper JSON
    feeds: dict = field(default_factory=dict)      # name → (content type, body)
    zotero_items: list = field(default_factory=list)
    zotero_key: str = "goodkey0000000000000000"
    page_size: int = 2
    fail: dict = field(default_factory=dict)       # prefix → (status, headers, body)
    requests: list = field(default_factory=list)

    def __post_init__(self):
        self._server = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def config(self) -> dict:
        return {"SAGAN_ARXIV_API_URL": f"{self.url}/arxiv/api/query", "SAGAN_CROSSREF_API_URL": f"{self.url}/crossref",
                "SAGAN_SEMANTIC_SCHOLAR_API_URL": f"{self.url}/s2/graph/v1", "SAGAN_ZOTERO_API_URL": f"{self.url}/zotero"}

    def _answer(self, path: str, query: dict, headers) -> tuple[int, dict, bytes]:
        for prefix, failure in self.fail.items():
            if path.startswith(prefix):
                return failure
        if path == "/arxiv/api/query":
            return self._arxiv(query)
        if path.startswith("/crossref/works/"):
            doi = urllib.parse.unquote(path[len("/crossref/works/"):]).lower()
            if doi not in self.crossref:
                return 404, {"Content-Type": "text/plain"}, b"Resource not found."
            body = {"status": "ok", "message-type": "work", "message-version": "1.0.0", "message": self.crossref[doi]}
            return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()
        if path.startswith("/s2/graph/v1/paper/"):
            paper_id = urllib.parse.unquote(path[len("/s2/graph/v1/paper/"):])
            if paper_id not in self.s2:
                return 404, {"Content-Type": "application/json"}, json.dumps(
                    {"error": f"Paper with id {paper_id} not found"}).encode()
            return 200, {"Content-Type": "application/json"}, json.dumps(self.s2[paper_id]).encode()
        if path.startswith("/zotero/"):
            return self._zotero(path, query, headers)
        if path.startswith("/feeds/"):
            name = path[len("/feeds/"):]
            if name in self.feeds:
                content_type, body = self.feeds[name]
                return 200, {"Content-Type": content_type}, body.encode()
        return 404, {"Content-Type": "text/plain"}, b"Not Found"

    def _arxiv(self, query: dict) -> tuple[int, dict, bytes]:
        ids = [i for i in query.get("id_list", [""])[0].split(",") if i]
        if ids:
            bad = [i for i in ids if not any(c.isdigit() for c in i)]
            if bad:
                entry = (f"<entry><id>http://arxiv.org/api/errors#incorrect_id_format_for_{bad[0]}</id>"
                         f"<title>Error</title><summary>incorrect id format for {bad[0]}</summary></entry>")
                return 200, {"Content-Type": "application/atom+xml"}, (
                    ATOM_HEAD.format(query="id_list", total=1, per=1) + entry + "</feed>").encode()
            found = [arxiv_entry(i, *self.arxiv[i]) for i in ids if i in self.arxiv]
        else:
            found = [arxiv_entry(i, *paper) for i, paper in self.arxiv.items()]
        head = ATOM_HEAD.format(query=escape(str(query)), total=len(found), per=len(found))
        return 200, {"Content-Type": "application/atom+xml"}, (head + "".join(found) + "</feed>").encode()

    def _zotero(self, path: str, query: dict, headers) -> tuple[int, dict, bytes]:
        if headers.get("Zotero-API-Key") != self.zotero_key:
            return 403, {"Content-Type": "text/plain"}, b"Forbidden"
        start = int(query.get("start", ["0"])[0])
        limit = min(int(query.get("limit", ["25"])[0]), self.page_size)
        page = self.zotero_items[start:start + limit]
        out = {"Content-Type": "application/json", "Total-Results": str(len(self.zotero_items))}
        if start + limit < len(self.zotero_items):
            out["Link"] = f'<{self.url}{path}?format=json&limit={limit}&start={start + limit}>; rel="next"'
        return 200, out, json.dumps(page).encode()

    def __enter__(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - the http.server API
                parsed = urllib.parse.urlsplit(self.path)
                fake.requests.append(self.path)
                status, headers, body = fake._answer(parsed.path, urllib.parse.parse_qs(parsed.query), self.headers)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
