"""The "has a visible character" rule for titles, token names and comments: by Unicode
category, plus the few graphic characters that render blank."""
from __future__ import annotations

import unicodedata

import pytest

from services.core.input_shape import BLANK_GRAPHIC_CHARACTERS, has_visible_text


@pytest.mark.parametrize("text", ["", None, " \t\n", "\u200b\u200c\u200d\u2060\ufeff", "\u00ad", "\u2800",
                                  "\U000e0020", "\U000e0001\U000e0041\U000e007f", "\u3164", "\u115f\u1160",
                                  "\uffa0", "\U0001d159", "\u0301", "\u034f\ufe0f", "\ue000", "\u202e\u2066",
                                  "\u3000\u00a0\u2028", "\x07\x1b"])
def test_text_with_no_visible_character(text):
    """Do spaces, format controls, tag characters, marks without a base, private use, controls
    and the blank fillers count as showing nothing?"""
    assert not has_visible_text(text)


@pytest.mark.parametrize("text", ["a", "7", "٣", "Ⅻ", "-", "€", "🧪", "😀\ufe0f", "日本", "한", "ㅤx", "⠿",
                                  "\u200bZ\u200b", "ä", "क्ष"])
def test_text_with_a_visible_character(text):
    """Do any letter, digit (of any script), punctuation or symbol, emoji included, count as visible,
    even next to invisible characters?"""
    assert has_visible_text(text)


def test_every_blank_graphic_character_is_one_category_alone_would_accept():
    """Is every entry of the blank list a letter, number, punctuation or symbol — the cases the
    category rule would let through, so none of them is dead weight?"""
    for char in BLANK_GRAPHIC_CHARACTERS:
        assert unicodedata.category(char)[0] in "LNPS", unicodedata.name(char)
