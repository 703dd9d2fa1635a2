"""The literature library (SPEC §11.3): adding items (by hand, or from what a metadata source
knows), merging duplicates, editing, read states, and full-text search.

One rule for every way in (the add form, the API, BibTeX, Zotero, feeds): `add` checks the
fields, then looks for the same work — same DOI, same arXiv id, or same normalized title and
first author — and fills the fields the existing item lacks instead of making a second row.
Imports pass `strict=False`: an over-long abstract from a feed is cut, not refused.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import LiteratureItem, Project, User, db
from models.literature import SEARCH_VECTOR_SQL
from services.core.clock import utcnow
from services.core import registry
from services.core.errors import NotFound, ValidationError
from services.research.literature_sources import identify, lookup, match_key, normalize_arxiv_id, normalize_doi

MAX_TITLE = 1000
MAX_AUTHORS = 200
MAX_AUTHOR = 300
MAX_TEXT = 100_000  # abstract, summary, reasons, notes: far above any real abstract, far below tsvector's 1 MB
MAX_TAGS = 50
MAX_TAG = 60
MAX_SEARCH = 500
# The queue's order as an index (migration 0023_literature_search): search and the unread
# queue read it in order and stop at the page's end.
QUEUE_INDEX = "ix_literature_items_queue"
# Above this many FTS5 matches SQLite walks QUEUE_INDEX rather than sorting every match
# (measured on 50,000 items: sorting 22,000 matches ~25 ms, the walk ~4 ms; the walk past
# 48 matches of a rare word ~14 ms, against 0.2 ms from the matches).
SQLITE_WALK_FROM_MATCHES = 5_000
TEXT_FIELDS = ("abstract", "summary_md", "relevance_reason_md", "threat_reason_md", "notes")
SHORT_FIELDS = {"venue": 500, "url": 2000, "openreview_id": 80, "s2_id": 80}
# Fields a merge may fill on an existing item (only where that item has nothing).
MERGE_FIELDS = ("authors", "year", "venue", "url", "arxiv_id", "doi", "openreview_id", "s2_id", "abstract", "type")
EDITABLE = ("type", "title", "authors", "year", "venue", "url", "arxiv_id", "doi", "openreview_id", "s2_id",
            *TEXT_FIELDS, "read_state", "score", "tags", "project_id")


# Every field a new item may be given, with the model's defaults: each INSERT then names the
# same columns, so an import's thousands of new items flush in a few multi-row INSERTs. The
# ORM batches only rows with the same columns; rows with and without a DOI alternating made
# a BibTeX import of 5,000 entries some 1,400 statements (bench/bench_bibtex_import.py).
NEW_ITEM_DEFAULTS = {"type": "paper", "authors": [], "year": None, "venue": "", "url": "", "arxiv_id": None,
                     "doi": None, "openreview_id": None, "s2_id": None, "abstract": "", "summary_md": "",
                     "relevance_reason_md": "", "threat_reason_md": "", "read_state": "unread", "score": None,
                     "tags": [], "notes": "", "project_id": None}


@dataclass
class Added:
    item: LiteratureItem
    created: bool  # False: merged into an item already in the library


def get_item(item_id) -> LiteratureItem:
    """One item by id; NotFound for a bad or unknown id."""
    try:
        key = item_id if isinstance(item_id, uuid.UUID) else uuid.UUID(str(item_id))
    except ValueError:
        raise NotFound("No such literature item.") from None
    item = db.session.get(LiteratureItem, key)
    if item is None:
        raise NotFound("No such literature item.")
    return item


def clean(data: dict, *, partial: bool = False, strict: bool = True) -> dict:
    """The item fields in `data`, checked and normalized. `partial`: only the keys given
    (a PATCH); otherwise a title is required. `strict=False` cuts over-long text instead of
    refusing it (imports). ValidationError names the field."""
    out: dict = {}

    def given(name: str) -> bool:
        return name in data and (partial or data.get(name) not in (None, ""))

    def text(name: str, limit: int, value) -> str:
        if value is None:
            return ""
        if not isinstance(value, (str, int, float)):
            raise ValidationError(f"{name} must be text.", field=name)
        value = str(value).replace("\x00", "").strip()
        if len(value) > limit:
            if strict:
                raise ValidationError(f"{_label(name)} is {len(value):,} characters; the most is {limit:,}.",
                                      field=name)
            value = value[:limit]
        return value

    if given("title") or not partial:
        out["title"] = " ".join(text("title", MAX_TITLE, data.get("title")).split())
        if not out["title"]:
            raise ValidationError("Give the title.", field="title")
    if given("type"):
        out["type"] = _one_of("type", data["type"], registry.LITERATURE_TYPES)
    if given("read_state"):
        out["read_state"] = _one_of("read_state", data["read_state"], registry.LITERATURE_READ_STATES)
    if given("source"):
        out["source"] = _one_of("source", data["source"], registry.LITERATURE_SOURCES)
    if given("authors"):
        out["authors"] = _authors(data["authors"], strict)
    if given("tags"):
        out["tags"] = _tags(data["tags"], strict)
    if given("year"):
        out["year"] = _year(data["year"])
    if given("score"):
        out["score"] = _score(data["score"])
    for name, limit in SHORT_FIELDS.items():
        if given(name):
            out[name] = text(name, limit, data[name]) or (None if name.endswith("_id") else "")
    if out.get("url") and not out["url"].lower().startswith(("https://", "http://")):
        if strict:
            raise ValidationError("The URL must start with https:// or http://.", field="url")
        out["url"] = ""
    for name in TEXT_FIELDS:
        if given(name):
            out[name] = text(name, MAX_TEXT, data[name])
    if given("doi"):
        raw = text("doi", 255, data["doi"])
        out["doi"] = normalize_doi(raw) if raw else None
        if raw and out["doi"] is None:
            if strict:
                raise ValidationError("That is not a DOI (they look like 10.1234/abcd).", field="doi")
            del out["doi"]
    if given("arxiv_id"):
        raw = text("arxiv_id", 40, data["arxiv_id"])
        out["arxiv_id"] = normalize_arxiv_id(raw) if raw else None
        if raw and out["arxiv_id"] is None:
            if strict:
                raise ValidationError("That is not an arXiv id (they look like 2401.01234).", field="arxiv_id")
            del out["arxiv_id"]
    if given("project_id"):
        out["project_id"] = project_id_of(data["project_id"])
    return out


def project_id_of(value) -> uuid.UUID | None:
    """A project named by id or slug; None for an empty value; ValidationError if there is none."""
    if value in (None, ""):
        return None
    try:
        project = db.session.get(Project, uuid.UUID(str(value)))
    except ValueError:
        project = db.session.scalar(sa.select(Project).where(Project.slug == str(value)))
    if project is None:
        raise ValidationError("No such project.", field="project_id")
    return project.id


def find_same(fields: dict) -> LiteratureItem | None:
    """The item already in the library for the same work, if any."""
    if fields.get("doi"):
        found = db.session.scalar(sa.select(LiteratureItem).where(LiteratureItem.doi == fields["doi"]))
        if found:
            return found
    if fields.get("arxiv_id"):
        found = db.session.scalar(sa.select(LiteratureItem).where(LiteratureItem.arxiv_id == fields["arxiv_id"]))
        if found:
            return found
    key = match_key(fields.get("title", ""), fields.get("authors") or [])
    return db.session.scalars(sa.select(LiteratureItem).where(LiteratureItem.match_key == key)
                              .order_by(LiteratureItem.created_at)).first()


class Matcher:
    """The library's identifiers and match keys held in memory, for an import of thousands
    of entries: one query up front instead of three per entry, and entries of the same
    import that name the same work merge with each other too."""

    def __init__(self):
        self.by = {"doi": {}, "arxiv_id": {}, "match_key": {}}
        self.pending: dict[uuid.UUID, LiteratureItem] = {}
        for row in db.session.execute(sa.select(LiteratureItem.id, LiteratureItem.doi, LiteratureItem.arxiv_id,
                                                LiteratureItem.match_key)):
            self.remember(row.id, doi=row.doi, arxiv_id=row.arxiv_id, match_key=row.match_key)

    def remember(self, item_id, **keys) -> None:
        for name, value in keys.items():
            if value:
                self.by[name].setdefault(value, item_id)

    def holds(self, name: str, value) -> bool:
        return value in self.by[name]

    def find(self, fields: dict) -> LiteratureItem | None:
        key = match_key(fields.get("title", ""), fields.get("authors") or [])
        for name, value in (("doi", fields.get("doi")), ("arxiv_id", fields.get("arxiv_id")), ("match_key", key)):
            if value and value in self.by[name]:
                item_id = self.by[name][value]
                if item_id not in self.pending:
                    # A re-import merges entry after entry: the rows come in one query, not one each.
                    self.pending.update({row.id: row for row in db.session.scalars(sa.select(LiteratureItem))})
                return self.pending[item_id]
        return None


def add(data: dict, *, source: str = "manual", strict: bool = True, feed_id=None,
        matcher: Matcher | None = None) -> Added:
    """Add an item, or merge it into the same work already in the library (fields it lacks
    are filled; nothing it has is overwritten). The caller commits; with a `matcher` (an
    import) the caller also flushes."""
    fields = clean(data, strict=strict)
    fields.setdefault("source", source)
    existing = matcher.find(fields) if matcher else find_same(fields)
    if existing is not None:
        fill_missing(existing, fields, matcher)
        return Added(existing, False)
    item = LiteratureItem(**{**NEW_ITEM_DEFAULTS, "authors": [], "tags": [], **fields}, id=uuid.uuid4(), feed_id=feed_id,
                          match_key=match_key(fields["title"], fields.get("authors") or []))
    db.session.add(item)
    if matcher is None:
        db.session.flush()
    else:
        matcher.pending[item.id] = item
        matcher.remember(item.id, doi=item.doi, arxiv_id=item.arxiv_id, match_key=item.match_key)
    return Added(item, True)


def suggest_for_member(data: dict, project_id, member_id) -> Added:
    """An invited collaborator's paper for their project (the caller checked they may): a
    title, authors, a year and a link, marked as theirs. A work already in this project's
    library is answered as such and left alone. A work in another project's library (or in
    none) is not merged into — the member may neither learn of it nor change it — so this
    adds a row of its own, without identifiers, for the owner to merge. The caller commits."""
    fields = clean({key: data.get(key) for key in ("title", "authors", "year", "url") if data.get(key)})
    key = match_key(fields["title"], fields.get("authors") or [])
    here = db.session.scalars(sa.select(LiteratureItem).where(LiteratureItem.match_key == key,
                                                              LiteratureItem.project_id == project_id)).first()
    if here is not None:
        return Added(here, False)
    item = LiteratureItem(**{**NEW_ITEM_DEFAULTS, **fields, "project_id": project_id}, id=uuid.uuid4(),
                          source="manual", match_key=key, proposed_by_member_id=member_id)
    db.session.add(item)
    # Stamp the member's row: the owner's Today watches `users`, not the whole library.
    db.session.execute(sa.update(User).where(User.id == member_id).values(updated_at=utcnow()))
    db.session.flush()
    return Added(item, True)


def fill_missing(item: LiteratureItem, fields: dict, matcher: Matcher | None = None) -> None:
    """Give `item` the fields it has no value for; an identifier another item holds is left alone."""
    for name in MERGE_FIELDS:
        value = fields.get(name)
        if value in (None, "", []) or getattr(item, name) not in (None, "", []):
            continue
        if name == "type" and item.type != "paper":
            continue
        if name in ("doi", "arxiv_id"):
            taken = matcher.holds(name, value) if matcher else db.session.scalar(
                sa.select(LiteratureItem.id).where(getattr(LiteratureItem, name) == value))
            if taken:
                continue
            if matcher:
                matcher.remember(item.id, **{name: value})
        setattr(item, name, value)
    if fields.get("authors") and item.authors == fields["authors"]:
        item.match_key = match_key(item.title, item.authors)


def update(item: LiteratureItem, data: dict) -> LiteratureItem:
    """Change the given fields; a DOI or arXiv id another item holds is refused. The caller commits."""
    fields = clean({k: v for k, v in data.items() if k in EDITABLE}, partial=True)
    for name in ("doi", "arxiv_id"):
        if fields.get(name) and db.session.scalar(sa.select(LiteratureItem.id).where(
                getattr(LiteratureItem, name) == fields[name], LiteratureItem.id != item.id)):
            raise ValidationError(f"Another item in the library has that {_label(name)}.", field=name)
    for name, value in fields.items():
        setattr(item, name, value)
    if "title" in fields or "authors" in fields:
        item.match_key = match_key(item.title, item.authors)
    db.session.flush()
    return item


def set_read_state(item: LiteratureItem, state: str) -> LiteratureItem:
    """Move an item to another read state. The caller commits."""
    item.read_state = _one_of("read_state", state, registry.LITERATURE_READ_STATES)
    return item


# --- listing and search -------------------------------------------------------------------


@dataclass
class Filters:
    query: str = ""
    project_id: uuid.UUID | None = None
    type: str | None = None
    read_state: str | None = None


def filters_from(args) -> Filters:
    """Search filters from a query string or JSON; ValidationError for an unknown value."""
    query = (args.get("q") or "").strip()
    if len(query) > MAX_SEARCH:
        raise ValidationError(f"A search is at most {MAX_SEARCH} characters.", field="q")
    kind = args.get("type") or None
    state = args.get("read_state") or args.get("readState") or None
    project = args.get("project") or args.get("projectId") or None
    return Filters(query=query,
                   type=_one_of("type", kind, registry.LITERATURE_TYPES) if kind else None,
                   read_state=_one_of("read_state", state, registry.LITERATURE_READ_STATES) if state else None,
                   project_id=project_id_of(project) if project else None)


def search(filters: Filters, *, limit: int = 50, offset: int = 0) -> list[LiteratureItem]:
    """Items matching the filters (PostgreSQL full-text search, SQLite FTS5 for a query), in
    the unread queue's order: the literature agent's score, then newest.

    Not by text relevance: ranking reads every match, and a common word matches half a big
    library (over 20,000 of 50,000 items: 100+ ms on PostgreSQL, bench/bench_literature_search.py).
    In the queue's order the database walks ix_literature_items_queue and stops at the page's
    last match: a few milliseconds whatever the library's size. Both backends agree on it."""
    statement = sa.select(LiteratureItem)
    if filters.project_id:
        statement = statement.where(LiteratureItem.project_id == filters.project_id)
    if filters.type:
        statement = statement.where(LiteratureItem.type == filters.type)
    if filters.read_state:
        statement = statement.where(LiteratureItem.read_state == filters.read_state)
    if filters.query:
        if db.engine.dialect.name == "postgresql":
            # PostgreSQL's planner picks between the GIN index (few matches) and the queue
            # index (many) from the tsvector column's statistics.
            statement = statement.where(postgres_text_match(filters.query))
        else:
            match = _fts5_query(filters.query)
            if not match:
                return []
            # SQLite always starts from the FTS5 matches (it cannot estimate a virtual table's),
            # then sorts them all; past a few thousand matches walking the queue index and
            # stopping at the page's end is far cheaper. A unary + on rowid is SQLite's way to
            # keep the planner from starting at the matches. Counting them costs ~1 ms.
            matches = db.session.scalar(sa.text("SELECT count(*) FROM literature_fts WHERE literature_fts MATCH :match"),
                                        {"match": match})
            rowid = "+literature_items.rowid" if matches > SQLITE_WALK_FROM_MATCHES else "literature_items.rowid"
            statement = statement.where(sa.literal_column(rowid).in_(
                sa.text("SELECT rowid FROM literature_fts WHERE literature_fts MATCH :match")
                .bindparams(match=match)))
    order = [LiteratureItem.score.desc().nulls_last(), LiteratureItem.created_at.desc(), LiteratureItem.id]
    return list(db.session.scalars(statement.order_by(*order).limit(limit).offset(offset)))


# Words too common to say which item is nearest (PostgreSQL's english configuration drops
# these itself; SQLite's FTS5 does not).
_COMMON_WORDS = frozenset("the and for with from that this what when does into than are was were how why its "
                          "our can not".split())
NEAREST_WORDS = 24


def nearest(text: str, *, exclude_id=None) -> LiteratureItem | None:
    """The library item whose words best match `text` (any of its words, not all, ranked by
    the text search's own relevance), or None when no item shares a word with it. One query
    on PostgreSQL (ts_rank over the stored vector), two on SQLite (FTS5's bm25, then the row)."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in (text or "").lower()).split()
             if len(w) > 2 and w not in _COMMON_WORDS][:NEAREST_WORDS]
    if not words:
        return None
    if db.engine.dialect.name == "postgresql":
        tsquery = sa.func.websearch_to_tsquery(sa.literal_column("'english'::regconfig"), " or ".join(words))
        vector = sa.literal_column(SEARCH_VECTOR_SQL)
        statement = sa.select(LiteratureItem).where(vector.op("@@")(tsquery))
        if exclude_id is not None:
            statement = statement.where(LiteratureItem.id != exclude_id)
        return db.session.scalars(statement.order_by(sa.func.ts_rank(vector, tsquery).desc(),
                                                     LiteratureItem.created_at.desc()).limit(1)).first()
    match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    ids = db.session.scalars(sa.text(
        "SELECT literature_items.id FROM literature_fts JOIN literature_items "
        "ON literature_items.rowid = literature_fts.rowid WHERE literature_fts MATCH :match "
        "ORDER BY literature_fts.rank LIMIT 2"), {"match": match}).all()
    chosen = next((key for key in (uuid.UUID(str(raw)) for raw in ids) if key != exclude_id), None)
    return db.session.get(LiteratureItem, chosen) if chosen else None


def postgres_text_match(query: str):
    """The condition of a web-search-style query against the stored search vector the GIN index holds."""
    tsquery = sa.func.websearch_to_tsquery(sa.literal_column("'english'::regconfig"), query)
    return sa.literal_column(SEARCH_VECTOR_SQL).op("@@")(tsquery)


def count(filters: Filters | None = None) -> int:
    """How many items the library holds (matching the non-text filters)."""
    statement = sa.select(sa.func.count()).select_from(LiteratureItem)
    if filters and filters.read_state:
        statement = statement.where(LiteratureItem.read_state == filters.read_state)
    return db.session.scalar(statement) or 0


def _fts5_query(text: str) -> str:
    """The words of `text` as FTS5 string literals (all must match): FTS5's own query syntax
    (AND, NEAR, column:, quotes) is not exposed to what the owner types."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in text).split() if w]
    return " ".join('"' + w.replace('"', '""') + '"' for w in words[:30])


def cited_items(keys) -> dict[tuple[str, str], LiteratureItem]:
    """The library items that citations name, in one query: {key: item} for each key
    (("arxiv", id) or ("doi", doi), as services.core.sanitize.citation_key reads them from
    text) whose work is in the library. Keys are normalized here as items are stored, so
    `arXiv:2401.01234v3` and `doi:10.1000/ABC` find theirs."""
    by_arxiv: dict[str, list] = {}
    by_doi: dict[str, list] = {}
    for key in keys:
        kind, value = key
        if kind == "arxiv" and (arxiv_id := normalize_arxiv_id(value)):
            by_arxiv.setdefault(arxiv_id, []).append(key)
        elif kind == "doi" and (doi := normalize_doi(value)):
            by_doi.setdefault(doi, []).append(key)
    if not by_arxiv and not by_doi:
        return {}
    rows = db.session.scalars(sa.select(LiteratureItem).where(sa.or_(
        LiteratureItem.arxiv_id.in_(list(by_arxiv)), LiteratureItem.doi.in_(list(by_doi)))))
    found = {}
    for item in rows:
        for key in by_arxiv.get(item.arxiv_id or "", []) + by_doi.get(item.doi or "", []):
            found[key] = item
    return found


# --- shapes -------------------------------------------------------------------------------


def to_json(item: LiteratureItem, *, full: bool = True) -> dict:
    """The item as the API shows it (camelCase)."""
    body = {"id": str(item.id), "type": item.type, "title": item.title, "authors": item.authors, "year": item.year,
            "venue": item.venue, "url": item.url, "arxivId": item.arxiv_id, "doi": item.doi,
            "openreviewId": item.openreview_id, "s2Id": item.s2_id, "readState": item.read_state,
            "score": item.score, "tags": item.tags, "source": item.source,
            "projectId": str(item.project_id) if item.project_id else None,
            "createdAt": item.created_at.isoformat(), "updatedAt": item.updated_at.isoformat()}
    if full:
        body.update(abstract=item.abstract, summaryMd=item.summary_md, relevanceReasonMd=item.relevance_reason_md,
                    threatReasonMd=item.threat_reason_md, notes=item.notes)
    return body


# --- field checks -------------------------------------------------------------------------


def _label(name: str) -> str:
    return {"doi": "DOI", "arxiv_id": "arXiv id", "summary_md": "The summary", "notes": "The notes",
            "abstract": "The abstract", "title": "The title"}.get(name, name.replace("_", " ").capitalize())


def _one_of(name: str, value, allowed: list[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        shown = str(value)[:40] if isinstance(value, (str, int, float)) else type(value).__name__
        raise ValidationError(f"Unknown {name.replace('_', ' ')} “{shown}”; one of: {', '.join(allowed)}.",
                              field=name)
    return value


def _authors(value, strict: bool) -> list[str]:
    if isinstance(value, str):
        separator = "\n" if "\n" in value else ";" if ";" in value else " and " if " and " in value else None
        value = value.split(separator) if separator else [value]
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValidationError("Authors are a list of names.", field="authors")
    names = [" ".join(a.split()) for a in value if a.strip()]
    if strict and (len(names) > MAX_AUTHORS or any(len(a) > MAX_AUTHOR for a in names)):
        raise ValidationError(f"At most {MAX_AUTHORS} authors of at most {MAX_AUTHOR} characters each.",
                              field="authors")
    return [a[:MAX_AUTHOR] for a in names[:MAX_AUTHORS]]


def _tags(value, strict: bool) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValidationError("Tags are a list of words.", field="tags")
    tags = list(dict.fromkeys(" ".join(t.split()).lower() for t in value if t.strip()))
    if strict and (len(tags) > MAX_TAGS or any(len(t) > MAX_TAG for t in tags)):
        raise ValidationError(f"At most {MAX_TAGS} tags of at most {MAX_TAG} characters each.", field="tags")
    return [t[:MAX_TAG] for t in tags[:MAX_TAGS]]


def _year(value) -> int | None:
    if value in (None, ""):
        return None
    try:
        year = int(str(value).strip())
    except ValueError:
        raise ValidationError("The year is a number like 2024.", field="year") from None
    if not 1000 <= year <= 2200:
        raise ValidationError("The year must be between 1000 and 2200.", field="year")
    return year


def _score(value) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValidationError("The score is a number.", field="score")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValidationError("The score is a number.", field="score") from None
    if score != score or abs(score) > 1e6:
        raise ValidationError("The score is a number between -1,000,000 and 1,000,000.", field="score")
    return score


def add_by_identifier(text: str, *, project_id=None) -> Added:
    """Add the work an arXiv id, DOI or URL names, with its metadata from arXiv, Crossref or
    Semantic Scholar; a work already in the library is found without asking anyone.
    LookupFailed (with what is known, for the manual form) when no source could tell."""
    text = (text or "").strip()
    if not text:
        raise ValidationError("Paste an arXiv id, a DOI or a URL.", field="identifier")
    if len(text) > 2000:
        raise ValidationError("That is too long to be an identifier or URL.", field="identifier")
    kind, value = identify(text)
    already = find_same({"arxiv_id": value}) if kind == "arxiv" else \
        find_same({"doi": value}) if kind == "doi" else None
    if already is not None and (already.arxiv_id == value or already.doi == value):
        return Added(already, False)
    fields = lookup(text)
    if project_id:
        fields["project_id"] = project_id
    return add(fields, source=fields.pop("source", "manual"), strict=False)
