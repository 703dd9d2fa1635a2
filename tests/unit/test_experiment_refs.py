"""`#<number>` in plans, comments and clean results links to that experiment,
through the one sanitizer; share pages relink or unlink them for mentors."""
from services.core.sanitize import (
    experiment_refs,
    relink_experiment_refs,
    render_markdown,
    sanitize_html,
    sanitize_result_html,
)


def test_markdown_links_references_but_not_code_urls_or_words():
    html = render_markdown("Consistent with #12; see step#3, `#4`, [x](https://e.com/#5), #0 and (#7).")
    assert '<a href="/experiments/12" class="experiment-ref" rel="noopener noreferrer nofollow">#12</a>' in html
    assert '<a href="/experiments/7" class="experiment-ref"' in html
    assert "step#3" in html and "<code>#4</code>" in html and "#0" in html
    assert experiment_refs(html) == {12, 7}


def test_results_link_references_in_a_new_tab_and_leave_css_svg_and_anchors_alone():
    html = sanitize_result_html('<style>p{color:#123456}</style><p>As in #42 (<a href="#fig">#fig</a>)</p>'
                                '<svg><text>#9</text></svg><pre>#8</pre>')
    assert ('<a href="/experiments/42" class="experiment-ref" rel="noopener noreferrer nofollow" '
            'target="_blank">#42</a>') in html  # a link navigating the frame would load the dashboard in it
    assert "color: #123456" in html and "<text>#9</text>" in html and "<pre>#8</pre>" in html
    assert experiment_refs(html) == {42}
    assert sanitize_result_html(html) == html  # stored markup survives being sanitized again


def test_only_plain_experiment_paths_pass_as_relative_links():
    html = sanitize_html('<a href="/experiments/5">a</a><a href="/experiments/5/../../settings">b</a>'
                         '<a href="/settings">c</a><a href="//evil.example/experiments/5">d</a>')
    assert html.count('href="') == 1 and 'href="/experiments/5"' in html


def test_relinking_points_links_where_the_reader_may_go_or_leaves_plain_text():
    html = sanitize_result_html("<style>p>a{color:red}</style><p>Unlike #3 and #4, done.</p>")
    relinked = relink_experiment_refs(html, lambda n: f"/s/token/{n}" if n == 3 else None)
    assert 'href="/s/token/3"' in relinked and ">#3</a>" in relinked
    assert "/experiments/" not in relinked and " and #4, done." in relinked
    assert "p>a { color: red }" in relinked  # styles untouched
    assert relink_experiment_refs("<p>no refs</p>", lambda n: None) == "<p>no refs</p>"
