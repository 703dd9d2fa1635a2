"""Clean-result lint (SPEC §8.3): each rule passes on a good result and fails on a bad one."""
from pathlib import Path

import pytest

from services.core.sanitize import sanitize_result_html
from services.results.result_lint import confidence_of, lint, title_without_confidence

GOOD = sanitize_result_html((Path(__file__).resolve().parents[1] / "fixtures" / "results" /
                             "clean_result.html").read_text())
TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"


def failing(title, body):
    return {f.rule for f in lint(title, body).findings if not f.ok}


def test_a_good_result_passes_every_rule():
    """Does the realistic result pass all nine checks?"""
    report = lint(TITLE, GOOD)
    assert report.passed and len(report.findings) == 9
    assert report.summary() == "Lint passed (9 checks)."


@pytest.mark.parametrize("title", ["Curriculum helps", "Curriculum helps (medium confidence)", ""])
def test_title_needs_a_confidence_suffix(title):
    """Is a title without LOW/MODERATE/HIGH confidence a finding?"""
    assert failing(title, GOOD) == {"title-confidence"}


def test_confidence_helpers():
    """Are the confidence and the bare title read from the suffix?"""
    assert confidence_of(TITLE) == "MODERATE"
    assert title_without_confidence(TITLE) == "Curriculum ordering changes final loss by <1%"
    assert confidence_of("No suffix") is None


def test_tldr_needs_four_labelled_bullets_and_a_figure_link():
    """Is a TL;DR with three bullets, or a Results bullet without #figure, reported?"""
    three = GOOD.replace('<li><strong>Next steps:</strong>', '<p><strong>Next steps:</strong>', 1)
    assert "tldr" in failing(TITLE, three)
    unlinked = GOOD.replace('href="#figure"', 'href="https://example.org"')
    assert failing(TITLE, unlinked) == {"results-link-figure"}
    assert {"tldr", "results-link-figure"} <= failing(TITLE, "<p>Just text.</p>")


def test_primary_figure_and_one_design_block():
    """Are a missing <figure id="figure"> and a second <details> reported?"""
    assert "primary-figure" in failing(TITLE, GOOD.replace('<figure id="figure">', '<figure>'))
    assert failing(TITLE, GOOD + "<details><summary>More</summary>x</details>") == {"design-block"}
    assert "design-block" in failing(TITLE, GOOD.replace("<details>", "<div>").replace("</details>", "</div>"))


def test_no_stray_h2():
    """Is an h2 outside the TL;DR and the design block reported?"""
    assert failing(TITLE, GOOD + "<h2>Appendix</h2>") == {"no-stray-h2"}


def test_svg_points_need_titles():
    """Is a data point without a <title> tooltip reported?"""
    body = GOOD.replace('<circle cx="80" cy="124" r="5"><title>Curriculum, seed 1: 2.872</title></circle>',
                        '<circle cx="80" cy="124" r="5"></circle>')
    assert failing(TITLE, body) == {"svg-tooltips"}


def test_fixed_widths_over_360_and_svgs_without_viewbox():
    """Are width="600", width: 720px and an SVG without viewBox reported?"""
    assert failing(TITLE, GOOD + '<table width="600"><tr><td>x</td></tr></table>') == {"fits-360"}
    assert failing(TITLE, GOOD.replace("max-width: 480px", "min-width: 720px")) == {"fits-360"}
    assert failing(TITLE, GOOD.replace('viewBox="0 0 320 200" ', "")) == {"svg-viewbox"}
    assert "fits-360" not in failing(TITLE, GOOD + '<img width="300" alt="">')
