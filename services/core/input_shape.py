"""Shape limits on what clients send.

Each of these answered 500 before: a NUL character (PostgreSQL text cannot hold one), a
lone surrogate (`"\\ud800"` is valid JSON but not encodable UTF-8), JSON nested deep
enough to exhaust Python's recursion limit while parsing, and metadata of any size.
Now each is a 400 that names the problem, checked before anything is stored.
"""
from __future__ import annotations

import json
import re
import unicodedata
from typing import Any
from urllib.parse import quote

from services.core.errors import TooLarge, ValidationError

JSON_MAX_DEPTH = 32
METADATA_MAX_BYTES = 64 * 1024  # like event bodies (config EVENT_BODY_MAX)
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A character shows something when its general category is a letter, number, punctuation or
# symbol (L*, N*, P*, S*). Separators (Z*: spaces), other (C*: controls, formats such as U+200B
# and the tag characters U+E0000-U+E007F, private use, unassigned) and marks (M*: they draw on a
# base character and alone show nothing or a stray accent) do not. A list of invisible characters
# is always one short; the categories cover every character Unicode adds to them.
_VISIBLE_CATEGORIES = frozenset("LNPS")
# Category alone is not enough: a few graphic characters render as nothing. The Hangul fillers
# are letters (Lo) that Unicode itself marks Default_Ignorable (a font draws them blank); the
# braille pattern with no dots and the musical null notehead are symbols (So) whose glyph is
# empty. Unicode 14 (2021) has no other L/N/P/S character that is default-ignorable.
BLANK_GRAPHIC_CHARACTERS = frozenset({
    "\u115f",  # HANGUL CHOSEONG FILLER (Lo)
    "\u1160",  # HANGUL JUNGSEONG FILLER (Lo)
    "\u3164",  # HANGUL FILLER (Lo)
    "\uffa0",  # HALFWIDTH HANGUL FILLER (Lo)
    "\u2800",  # BRAILLE PATTERN BLANK (So)
    "\U0001d159",  # MUSICAL SYMBOL NULL NOTEHEAD (So)
})


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON text, in one pass (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_json(raw: bytes) -> Any:
    """A request body's JSON, or ValidationError(invalid_json): bad UTF-8 or JSON, nesting past
    JSON_MAX_DEPTH, or a NUL / lone surrogate in any string."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("The body is not UTF-8 text.", code="invalid_json") from None
    # A body with fewer brackets than the limit cannot nest past it: most never need the walk.
    if text.count("[") + text.count("{") > JSON_MAX_DEPTH and json_depth(text) > JSON_MAX_DEPTH:
        raise ValidationError(f"The JSON nests more than {JSON_MAX_DEPTH} levels deep.", code="invalid_json")
    try:
        data = json.loads(text)
    except ValueError:
        raise ValidationError("The body is not valid JSON.", code="invalid_json") from None
    check_strings(data)
    return data


def check_text(value: str, field: str | None = None) -> None:
    """Refuse a NUL character or a lone surrogate in one string."""
    if "\x00" in value:
        raise ValidationError(f"{field or 'The text'} contains a NUL character.", field=field, code="invalid_text")
    if _LONE_SURROGATE.search(value):
        raise ValidationError(f"{field or 'The text'} contains an unpaired UTF-16 surrogate (not valid Unicode).",
                              field=field, code="invalid_text")


def check_strings(data: Any) -> None:
    """check_text on every key and string inside parsed JSON (iteratively)."""
    stack = [(data, None)]
    while stack:
        value, field = stack.pop()
        if isinstance(value, str):
            check_text(value, field)
        elif isinstance(value, dict):
            for key, item in value.items():
                check_text(key, key[:40])
                stack.append((item, field or key[:40]))
        elif isinstance(value, list):
            stack.extend((item, field) for item in value)


def check_metadata_size(metadata: dict | None, field: str = "metadata") -> None:
    """Refuse metadata whose JSON is over METADATA_MAX_BYTES."""
    if not metadata:
        return
    size = len(json.dumps(metadata, ensure_ascii=False, default=str).encode("utf-8", errors="replace"))
    if size > METADATA_MAX_BYTES:
        raise TooLarge(f"The {field} is {size:,} bytes of JSON; the limit is {METADATA_MAX_BYTES:,}.",
                       field=field)


def is_visible_character(char: str) -> bool:
    """Does this one character draw something (a letter, number, punctuation or symbol that is
    not one of the blank-rendering BLANK_GRAPHIC_CHARACTERS)?"""
    return unicodedata.category(char)[0] in _VISIBLE_CATEGORIES and char not in BLANK_GRAPHIC_CHARACTERS


def has_visible_text(text: str | None) -> bool:
    """Does `text` show anything: at least one visible character, not only spaces, formatting
    controls, combining marks and blank fillers?"""
    return any(is_visible_character(char) for char in text or "")


def content_disposition(filename: str) -> str:
    """An RFC 6266 attachment header that any filename survives: an ASCII fallback without
    quotes, backslashes, `;` or controls, and the exact name as UTF-8 in `filename*`."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\;%' else "_" for c in filename) or "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
