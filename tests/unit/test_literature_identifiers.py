"""What the owner pastes, read as identifiers; the keys that make duplicates meet."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.research.literature_sources import identify, match_key, normalize_arxiv_id, normalize_doi


@pytest.mark.parametrize("text, expected", [
    ("2401.01234", ("arxiv", "2401.01234")), ("arXiv:2401.01234v3", ("arxiv", "2401.01234")),
    ("hep-th/9901001v2", ("arxiv", "hep-th/9901001")), ("https://arxiv.org/abs/2401.01234v2", ("arxiv", "2401.01234")),
    ("https://arxiv.org/pdf/2401.01234", ("arxiv", "2401.01234")), ("10.1000/ABC", ("doi", "10.1000/abc")),
    ("https://doi.org/10.1000/x.y", ("doi", "10.1000/x.y")), ("doi:10.1000/xyz.", ("doi", "10.1000/xyz")),
    ("https://openreview.net/forum?id=abc123", ("openreview", "abc123")),
    ("https://blog.example/post", ("url", "https://blog.example/post")), ("just words", ("unknown", "just words")),
])
def test_identify_reads_what_was_pasted(text, expected):
    """Is each arXiv id (new, old, versioned, as a URL), DOI, OpenReview URL and other URL told apart?"""
    assert identify(text) == expected


def test_identifiers_that_are_not_refuse_to_normalize():
    """Do malformed DOIs and arXiv ids normalize to None rather than to something stored?"""
    assert normalize_doi("11.1000/x") is None and normalize_doi("") is None
    assert normalize_arxiv_id("2401.1") is None and normalize_arxiv_id(None) is None


def test_match_key_ignores_case_accents_punctuation_and_name_order():
    """Do "Grokking: Generalization" by "Power, Alethea" and its plain-cased twin share a key, and differ from others?"""
    assert match_key("Grokking: Generalization!", ["Power, Alethea"]) == match_key("grokking generalization",
                                                                                 ["Alethea Power"])
    assert match_key("Müller's Paper", ["Jürgen Müller"]) == match_key("Mullers paper", ["J. Muller"])
    assert match_key("Grokking", ["Alethea Power"]) != match_key("Grokking", ["Someone Else"])


@given(st.text(max_size=200), st.lists(st.text(max_size=50), max_size=3))
def test_match_key_is_total_and_bounded(title, authors):
    """Does any title and author list give a key short enough for its column?"""
    assert len(match_key(title, authors)) <= 400


@given(st.text(max_size=300))
def test_identify_never_raises(text):
    """Does any pasted text get a kind rather than an exception?"""
    assert identify(text)[0] in ("arxiv", "doi", "openreview", "url", "unknown")
