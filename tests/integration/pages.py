"""Small readers for the HTML our pages render, so tests assert on what a user sees.

Regular expressions are enough here: cards and columns are flat, well-known markup.
"""
from __future__ import annotations

import html
import re


def text(response_or_html) -> str:
    """The page's HTML with entities decoded (so "can't" reads as in the browser)."""
    raw = response_or_html if isinstance(response_or_html, str) else response_or_html.text
    return html.unescape(raw)


def cards(page) -> dict[int, str]:
    """Board cards by experiment number → the card's HTML."""
    found = {}
    for match in re.finditer(r'<article class="card[^"]*"[^>]*\bid="card-(\d+)".*?</article>',
                             text(page), re.S):
        found[int(match.group(1))] = match.group(0)
    return found


def columns(page) -> list[tuple[str, list[int]]]:
    """Board columns in page order: (column key, [card numbers in it])."""
    found = []
    for match in re.finditer(r'<section class="column[^"]*"[^>]*data-column="([a-z_]+)".*?</section>',
                             text(page), re.S):
        numbers = [int(n) for n in re.findall(r'\bid="card-(\d+)"', match.group(0))]
        found.append((match.group(1), numbers))
    return found


def card_classes(card_html: str) -> list[str]:
    return re.match(r'<article class="([^"]*)"', card_html).group(1).split()


def table_numbers(page) -> list[int]:
    """Experiment numbers in the order the /experiments table lists them."""
    body = text(page)
    tbody = re.search(r"<tbody>(.*?)</tbody>", body, re.S)
    if not tbody:
        return []
    rows = re.findall(r"<tr\b.*?</tr>", tbody.group(1), re.S)
    return [int(re.search(r">\s*#(\d+)\b", row).group(1)) for row in rows]


def your_turn_count(page) -> int | None:
    match = re.search(r"Your turn \((\d+)\)", text(page))
    return int(match.group(1)) if match else None


def timeline_notes(page) -> list[str]:
    """Event notes in the order the timeline shows them."""
    return [n.strip() for n in re.findall(r'<p class="note">(.*?)</p>', text(page), re.S)]


def older_events_link(page) -> str | None:
    match = re.search(r'<a href="([^"]*/timeline\?[^"]*)"[^>]*>\s*Older events', text(page))
    return match.group(1) if match else None
