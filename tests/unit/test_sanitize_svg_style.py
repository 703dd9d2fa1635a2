"""An SVG shape's inline `style` in a result or figure: kept as presentation attributes, only
the harmless SVG properties, so a chart drawn by a plotting library keeps its colours (it was
a black rectangle: every shape filled black once `style` was dropped)."""
from __future__ import annotations

import re

import pytest

from services.core.sanitize import sanitize_html, sanitize_result_html

CHART = """<svg xmlns="http://www.w3.org/2000/svg" width="288pt" height="180pt" viewBox="0 0 288 180">
 <path d="M 0 180 L 288 180 L 288 0 L 0 0 z" style="fill: #ffffff"/>
 <path d="M 40 150 L 250 40" style="fill: none; stroke: #1f77b4; stroke-width: 1.5; stroke-linecap: square"/>
 <text x="144" y="170" style="font-size: 10px; font-family: 'DejaVu Sans', sans-serif; text-anchor: middle">step</text>
</svg>"""


def test_a_plotting_librarys_styles_become_presentation_attributes():
    """Do fill, stroke, width, line cap and the text's font and anchor survive as attributes,
    with no style attribute left?"""
    clean = sanitize_result_html(CHART)
    assert "style=" not in clean
    background, line = re.findall(r"<path[^>]*>", clean)
    assert 'fill="#ffffff"' in background
    for attribute in ('fill="none"', 'stroke="#1f77b4"', 'stroke-width="1.5"', 'stroke-linecap="square"'):
        assert attribute in line
    text = re.search(r"<text[^>]*>", clean).group(0)
    assert 'font-size="10px"' in text and 'text-anchor="middle"' in text and "DejaVu Sans" in text


@pytest.mark.parametrize("style, kept", [
    ("fill: url(https://evil.example/x.svg#p)", None),              # a remote paint server
    ("fill: url(#gradient)", ('fill', 'url(#gradient)')),           # one inside the document
    ("stroke: expression(alert(1))", None),
    ("fill: red; behavior: url(x.htc); -moz-binding: url(x.xml)", ('fill', 'red')),
    ("position: fixed; fill: blue", ('fill', 'blue')),              # not an SVG property: dropped
    ("fill: \\65xpression(alert(1))", None),
    ("fill: red</style><script>alert(1)</script>", None),
    ("width: 9999px; transform: scale(100)", None),                 # geometry is never taken from style
])
def test_only_harmless_svg_properties_are_taken(style, kept):
    """Does a hostile or irrelevant declaration stay out, while a harmless one beside it is kept?"""
    clean = sanitize_result_html(f'<svg viewBox="0 0 10 10"><rect width="5" height="5" style="{style}"></rect></svg>')
    rect = re.search(r"<rect[^>]*>", clean).group(0)
    assert "style=" not in rect and "evil" not in clean and "expression" not in clean and "script" not in clean
    assert "behavior" not in clean and "binding" not in clean and "9999" not in clean and "scale" not in clean
    if kept:
        assert f'{kept[0]}="{kept[1]}"' in rect
    else:
        assert re.fullmatch(r'<rect width="5" height="5">', rect)


def test_a_style_wins_over_the_attribute_of_the_same_name():
    """As in a browser, does the style's fill replace the element's own fill attribute?"""
    clean = sanitize_result_html('<svg viewBox="0 0 1 1"><rect fill="black" style="fill: #4263eb"></rect></svg>')
    assert 'fill="#4263eb"' in clean and 'fill="black"' not in clean


def test_html_elements_and_dashboard_markup_keep_no_style():
    """Outside a result's SVG nothing changes: an HTML element's style, and any style in a
    dashboard note, are dropped as before."""
    assert "red" not in sanitize_result_html('<p style="color: red; fill: red">x</p>')
    assert "fill" not in sanitize_html('<svg><rect style="fill: red"></rect></svg>')
