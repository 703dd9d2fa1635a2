"""BibTeX import and export for the literature library, with bibtexparser 2.x (its API is
`parse_string` → a Library of entries and `failed_blocks`, `write_string` back; 1.x's
`loads`/`BibDatabase` are gone). Import keeps what parses and reports each broken entry by
its line; every entry goes through literature.add, so duplicates merge.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

import bibtexparser
from flask import current_app
from bibtexparser.model import Entry, Field

from models import LiteratureItem, db
from services.core.errors import SaganError, ValidationError
from services.research import literature

_TYPES = {"article": "paper", "inproceedings": "paper", "conference": "paper", "incollection": "paper",
          "phdthesis": "report", "mastersthesis": "report", "techreport": "report", "book": "other",
          "misc": "paper", "unpublished": "paper", "online": "blog_post", "software": "repo", "video": "video"}
_ENTRY_TYPES = {"paper": "article", "report": "techreport", "blog_post": "online", "repo": "software",
                "video": "misc", "forum_post": "online", "newsletter": "online", "other": "misc"}


@dataclass
class ImportReport:
    added: int = 0
    merged: int = 0
    problems: list[str] = field(default_factory=list)  # "line 12: …", one per entry not imported


def import_bibtex(raw: bytes | str, *, project_id=None) -> ImportReport:
    """Add every entry that parses (merging duplicates); each broken one is reported by line.
    The caller commits."""
    if isinstance(raw, bytes):
        limit = current_app.config["LITERATURE_IMPORT_MAX_BYTES"]
        if len(raw) > limit:
            raise ValidationError(f"The file is over {limit:,} bytes.", field="file")
        try:
            raw = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raw = raw.decode("latin-1")
    if not raw.strip():
        raise ValidationError("The file is empty.", field="file")
    library = bibtexparser.parse_string(raw)
    report = ImportReport()
    matcher = literature.Matcher()
    for block in library.failed_blocks:
        line = (block.start_line or 0) + 1
        reason = getattr(block, "error", None)
        report.problems.append(f"line {line}: could not be read as a BibTeX entry"
                               + (f" ({_short(reason)})" if reason else "") + ".")
    if not library.entries and not library.failed_blocks:
        raise ValidationError("No BibTeX entries found in the file.", field="file")
    for entry in library.entries:
        line = (entry.start_line or 0) + 1
        try:
            fields = entry_fields(entry)
            if project_id:
                fields["project_id"] = project_id
            added = literature.add(fields, source="bibtex", strict=False, matcher=matcher)
        except SaganError as exc:
            report.problems.append(f"line {line} ({entry.key}): {exc.message}")
            continue
        if added.created:
            report.added += 1
        else:
            report.merged += 1
    db.session.flush()
    return report


def entry_fields(entry: Entry) -> dict:
    """A parsed entry as item fields (braces and common LaTeX accents stripped)."""
    values = {f.key.lower(): _plain(f.value) for f in entry.fields}
    if not values.get("title"):
        raise ValidationError("the entry has no title.")
    eprint = values.get("eprint") if values.get("archiveprefix", "arxiv").lower() == "arxiv" else None
    return {"title": values["title"], "authors": _authors(values.get("author", "")),
            "year": _year(values.get("year") or values.get("date", "")),
            "venue": values.get("journal") or values.get("booktitle") or values.get("publisher") or "",
            "url": values.get("url", ""), "doi": values.get("doi") or None, "arxiv_id": eprint or None,
            "abstract": values.get("abstract", ""), "notes": values.get("note", ""),
            "tags": values.get("keywords", ""), "type": _TYPES.get(entry.entry_type.lower(), "paper")}


def export_bibtex(items: list[LiteratureItem]) -> str:
    """The items as a .bib file; keys are surname+year+first title word, made unique."""
    library = bibtexparser.Library()
    used: set[str] = set()
    for item in items:
        key = _key(item, used)
        fields = [Field("title", "{" + item.title + "}")]
        if item.authors:
            fields.append(Field("author", " and ".join(item.authors)))
        for name, value in (("year", item.year), ("journal" if item.type == "paper" else "howpublished", item.venue),
                            ("doi", item.doi), ("url", item.url), ("abstract", item.abstract)):
            if value:
                fields.append(Field(name, str(value)))
        if item.arxiv_id:
            fields += [Field("eprint", item.arxiv_id), Field("archiveprefix", "arXiv")]
        if item.tags:
            fields.append(Field("keywords", ", ".join(item.tags)))
        library.add(Entry(_ENTRY_TYPES.get(item.type, "misc"), key, fields))
    return bibtexparser.write_string(library)


def _key(item: LiteratureItem, used: set[str]) -> str:
    surname = re.sub(r"[^A-Za-z]", "", (item.first_author.split(",")[0] if "," in item.first_author
                                        else (item.first_author.split() or ["anon"])[-1])) or "anon"
    word = next((w for w in re.findall(r"[A-Za-z]+", item.title) if len(w) > 3), "item")
    base = f"{surname.lower()}{item.year or ''}{word.lower()}"
    key, n = base, 1
    while key in used:
        n += 1
        key = f"{base}{chr(ord('a') + n - 2) if n < 28 else n}"
    used.add(key)
    return key


_ACCENTS = {'"': "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", "c": "\u0327"}


def _plain(value: str) -> str:
    """BibTeX field text without grouping braces and with common accent commands resolved."""
    text = re.sub(r"\\([\"'`^~c])\{?([A-Za-z])\}?", lambda m: unicodedata.normalize(
        "NFC", m.group(2) + _ACCENTS[m.group(1)]), str(value))
    text = text.replace("{", "").replace("}", "").replace("\\&", "&").replace("~", " ")
    return " ".join(text.split())


def _authors(text: str) -> list[str]:
    """`Vaswani, Ashish and Shazeer, Noam` → ["Ashish Vaswani", "Noam Shazeer"]."""
    names = []
    for name in re.split(r"\s+and\s+", text):
        name = name.strip()
        if not name:
            continue
        if "," in name:
            last, _, first = name.partition(",")
            name = f"{first.strip()} {last.strip()}".strip()
        names.append(name)
    return names


def _year(text: str) -> int | None:
    match = re.search(r"\b(1\d{3}|2[01]\d{2})\b", text or "")
    return int(match.group(1)) if match else None


def _short(reason) -> str:
    return " ".join(str(reason).split())[:160]
