"""Importing a Zotero library through the Zotero web API v3 (`/users/{id}/items/top` or
`/groups/{id}/items/top`, JSON, 100 items a page, the next page named by the `Link: …;
rel="next"` header and the count by `Total-Results`; the key travels in `Zotero-API-Key`,
and 403 means Zotero refused it). The key and library id live in the settings table; the
key is never shown back. Items go through literature.add, so duplicates merge.
"""
from __future__ import annotations

import re

from flask import current_app

from models import db
from services.core import settings
from services.core.errors import ValidationError
from services.research import literature
from services.research.literature_sources import LookupFailed, fetch, normalize_arxiv_id

MAX_PAGES = 100  # 10,000 items
SKIPPED_TYPES = {"attachment", "note", "annotation"}
_TYPES = {"journalArticle": "paper", "conferencePaper": "paper", "preprint": "paper", "report": "report",
          "thesis": "report", "blogPost": "blog_post", "forumPost": "forum_post", "webpage": "other",
          "videoRecording": "video", "computerProgram": "repo", "book": "other", "bookSection": "paper"}


def configured() -> dict:
    """What the settings page may show: the library, and only whether a key is saved."""
    return {"library_type": settings.get("zotero_library_type") or "user",
            "library_id": settings.get("zotero_library_id") or "",
            "has_key": bool(settings.get("zotero_api_key"))}


def update_settings(form) -> None:
    """Save the library and (when one is typed) the key; `clear` forgets all three. The caller commits."""
    if form.get("clear") == "1":
        for key in ("zotero_library_type", "zotero_library_id", "zotero_api_key"):
            settings.put(key, None)
        return
    library_type = form.get("library_type") or "user"
    if library_type not in ("user", "group"):
        raise ValidationError("The library is a user's or a group's.", field="library_type")
    library_id = (form.get("library_id") or "").strip()
    if not re.fullmatch(r"\d{1,20}", library_id):
        raise ValidationError("The library id is the number Zotero shows (Settings → Feeds/API: “Your userID”).",
                              field="library_id")
    key = (form.get("api_key") or "").strip()
    if key and not re.fullmatch(r"[A-Za-z0-9]{10,64}", key):
        raise ValidationError("A Zotero API key is letters and digits (24 of them).", field="api_key")
    if not key and not settings.get("zotero_api_key"):
        raise ValidationError("Give the API key.", field="api_key")
    settings.put("zotero_library_type", library_type)
    settings.put("zotero_library_id", library_id)
    if key:
        settings.put("zotero_api_key", key)


def import_library(*, project_id=None) -> dict:
    """Read every top-level item of the configured library and add it; counts of added,
    merged and skipped. Nothing is written unless every page was read. The caller commits."""
    setup = configured()
    key = settings.get("zotero_api_key")
    if not setup["library_id"] or not key:
        raise ValidationError("Set the Zotero library id and API key in Settings first.", field="zotero")
    base = current_app.config["SAGAN_ZOTERO_API_URL"].rstrip("/")
    url = f"{base}/{setup['library_type']}s/{setup['library_id']}/items/top?format=json&limit=100"
    headers = {"Zotero-API-Key": key, "Zotero-API-Version": "3"}
    records: list[dict] = []
    for _page in range(MAX_PAGES):
        response = fetch(url, headers=headers, schemes=("https", "http"))
        if response.status_code == 403:
            raise LookupFailed("Zotero refused the API key (403): check it can read this library.")
        if response.status_code == 404:
            raise LookupFailed("Zotero knows no such library (404): check the library id and kind.")
        if response.status_code == 429:
            raise LookupFailed("Zotero is limiting requests; try the import again later.")
        if response.status_code != 200:
            raise LookupFailed(f"Zotero answered HTTP {response.status_code}.")
        try:
            page = response.json()
        except ValueError:
            raise LookupFailed("Zotero's answer was not JSON.") from None
        if not isinstance(page, list):
            raise LookupFailed("Zotero's answer was not a list of items.")
        records.extend(page)
        url = response.links.get("next", {}).get("url")
        if not url:
            break
    counts = {"added": 0, "merged": 0, "skipped": 0}
    matcher = literature.Matcher()
    for record in records:
        fields = item_fields(record)
        if fields is None:
            counts["skipped"] += 1
            continue
        if project_id:
            fields["project_id"] = project_id
        try:
            added = literature.add(fields, source="zotero", strict=False, matcher=matcher)
        except ValidationError:
            counts["skipped"] += 1
            continue
        counts["added" if added.created else "merged"] += 1
    db.session.flush()
    return counts


def item_fields(record) -> dict | None:
    """A Zotero item (`data` of the v3 JSON) as item fields; None for attachments, notes or no title."""
    data = record.get("data") if isinstance(record, dict) else None
    if not isinstance(data, dict) or data.get("itemType") in SKIPPED_TYPES or not data.get("title"):
        return None
    authors = []
    for creator in data.get("creators") or []:
        if isinstance(creator, dict) and creator.get("creatorType", "author") == "author":
            name = creator.get("name") or " ".join(p for p in (creator.get("firstName"), creator.get("lastName")) if p)
            if name:
                authors.append(name)
    year = re.search(r"\b(1\d{3}|2[01]\d{2})\b", data.get("date") or "")
    arxiv = re.search(r"arXiv:\s*(\S+)", data.get("extra") or "")
    return {"title": data["title"], "authors": authors, "year": int(year.group(1)) if year else None,
            "venue": data.get("publicationTitle") or data.get("proceedingsTitle") or data.get("websiteTitle") or "",
            "url": data.get("url") or "", "doi": data.get("DOI") or None,
            "arxiv_id": normalize_arxiv_id(arxiv.group(1)) if arxiv else None,
            "abstract": data.get("abstractNote") or "",
            "tags": [t.get("tag", "") for t in data.get("tags") or [] if isinstance(t, dict)],
            "type": _TYPES.get(data.get("itemType"), "other")}
