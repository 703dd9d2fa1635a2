"""The result sanitizer (SPEC §8.2): at least 60 hostile inputs come out inert under both
policies, and a realistic clean result comes out intact."""
from pathlib import Path

import pytest

from services.core.sanitize import (
    DASHBOARD,
    css_hashes,
    filter_css,
    filter_declarations,
    sanitize_html,
    sanitize_result_html,
)
from tests.hostile_html import HOSTILE, inert_problems

REALISTIC = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()


def test_the_corpus_is_large_enough():
    """Does the hostile corpus hold at least 60 distinct inputs?"""
    assert len(set(HOSTILE)) >= 60


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_input_is_inert_in_a_result(payload):
    """Does each hostile input lose everything that could run, load or escape (result policy)?"""
    out = sanitize_result_html(payload)
    assert inert_problems(out) == [], out
    assert "alert(1)" not in out or "&lt;" in out or "<" not in out.split("alert(1)")[0][-20:], out


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_input_is_inert_in_the_dashboard(payload):
    """Does the stricter dashboard policy (comments, notes, plans) make it inert too?"""
    out = sanitize_html(payload)
    assert inert_problems(out, DASHBOARD) == [], out
    assert "<style" not in out and "<svg" not in out


@pytest.mark.parametrize("payload", HOSTILE)
def test_sanitizing_is_idempotent(payload):
    """Does sanitizing the sanitized copy change nothing (re-saving a stored result)?"""
    once = sanitize_result_html(payload)
    assert sanitize_result_html(once) == once


def test_script_text_does_not_survive_as_text():
    """Are script bodies dropped with their element, not left behind as visible text?"""
    assert sanitize_result_html("<p>a<script>alert(1)</script>b</p>") == "<p>ab</p>"
    assert "alert" not in sanitize_result_html("<svg><script>alert(1)</script><circle r='1'/></svg>")


def test_realistic_clean_result_comes_out_intact():
    """Do the TL;DR, the SVG chart with <title> tooltips, the <details> design block, the
    table and the scoped <style> all survive?"""
    out = sanitize_result_html(REALISTIC)
    for needle in ('<section class="tldr" id="tldr">', '<figure id="figure">', 'viewBox="0 0 320 200"',
                   '<title>Curriculum, seed 3: 2.868</title>', '<circle cx="80" cy="124" r="5">',
                   '<text class="label" x="34" y="44" text-anchor="end">2.90</text>',
                   '<details>', '<summary>Experimental design</summary>', '<table class="runs">',
                   '<td class="num">±0.004</td>', '<a href="#figure" rel="noopener noreferrer nofollow">',
                   '.chart .curriculum { fill: #3552c8 }', '@media (max-width: 480px)'):
        assert needle in out, needle
    assert out.count("<title>") == 11 and out.count("<circle") == 10
    assert 'target="_blank"' in out  # the code link opens a new tab, outside the frame
    assert inert_problems(out) == []


def test_css_filter_keeps_safe_rules_and_drops_the_rest():
    """Does the <style> filter keep ordinary rules and drop imports, remote urls, expression()
    and position: fixed, declaration by declaration?"""
    css = filter_css("@import url(x.css); p { color: red; background: url(https://evil.example/x); "
                     "position: fixed } .ok { position: relative; background: url(data:image/png;base64,AA) } "
                     "@media (max-width: 400px) { p { font-size: 12px } } @font-face { src: url(x) }")
    assert css == ("p { color: red }\n.ok { position: relative; background: url(data:image/png;base64,AA) }\n"
                   "@media (max-width: 400px) {\np { font-size: 12px }\n}")


def test_css_cannot_close_its_style_element():
    """Is `<` escaped, so a CSS string cannot end the <style> element in the frame?"""
    assert "<" not in filter_css('p { content: "</style><script>alert(1)</script>" }')


def test_declaration_filter():
    """Are single declarations filtered the same way (used for the same rules everywhere)?"""
    assert filter_declarations("color: red; width: expression(alert(1)); position: fixed; -moz-binding: url(x)") \
        == "color: red"


def test_style_hashes_match_the_sanitized_styles():
    """Does css_hashes give one CSP hash per <style> element of the sanitized copy?"""
    out = sanitize_result_html(REALISTIC)
    hashes = css_hashes(out)
    assert len(hashes) == 1 and hashes[0].startswith("'sha256-")
    assert css_hashes("<p>no styles</p>") == []


def test_links_get_rel_and_new_tab_in_results_only():
    """Do result links open a new tab with rel=noopener noreferrer nofollow, and comment links keep rel only?"""
    assert sanitize_result_html('<a href="https://example.org">x</a>') == \
        '<a href="https://example.org" rel="noopener noreferrer nofollow" target="_blank">x</a>'
    assert sanitize_html('<a href="https://example.org" target="_top">x</a>') == \
        '<a href="https://example.org" rel="noopener noreferrer nofollow">x</a>'


def test_dashboard_policy_drops_ids():
    """Can a comment no longer carry an id that shadows the page's htmx targets?"""
    assert sanitize_html('<p id="toasts">x</p>') == "<p>x</p>"
    assert sanitize_result_html('<p id="toasts">x</p>') == '<p id="toasts">x</p>'
