"""`link_citations`: citations of works (`arXiv:…`, `doi:…`) in sanitized markup become links to
what the resolver knows, in one call per text, never inside links, code, preformatted text,
styles or SVG; the markup around them is unchanged (entities included)."""
import re

from services.core.sanitize import (
    link_citations,
    relink_experiment_refs,
    render_markdown,
    sanitize_html,
    sanitize_result_html,
)
from tests.hostile_html import HOSTILE, inert_problems

PAPER = ("arxiv", "2401.01234")


def _resolver(known: dict):
    calls = []

    def resolve(keys):
        calls.append(set(keys))
        return {key: target for key, target in known.items() if key in keys}
    return resolve, calls


def test_citations_the_resolver_knows_become_links_in_one_call():
    """Are a versioned arXiv id and a DOI before punctuation linked, an unknown one left text,
    with one resolver call for all of them?"""
    html = render_markdown("As arXiv:2401.01234v3 and doi:10.1000/ABC(2)). Not arXiv:2402.99999; see also "
                           "doi:10.1000/abc(2).")
    resolve, calls = _resolver({PAPER: ("/library/a", "Paper A"), ("doi", "10.1000/ABC(2)"): ("/library/b", "B"),
                                ("doi", "10.1000/abc(2)"): ("/library/b", "B")})
    out = link_citations(html, resolve)
    assert calls == [{PAPER, ("doi", "10.1000/ABC(2)"), ("doi", "10.1000/abc(2)"), ("arxiv", "2402.99999")}]
    assert ('<a href="/library/a" class="library-ref" title="Paper A" rel="noopener noreferrer nofollow">'
            "arXiv:2401.01234v3</a>") in out
    assert '>doi:10.1000/ABC(2)</a>). Not arXiv:2402.99999;' in out
    assert out.endswith('>doi:10.1000/abc(2)</a>.</p>')
    quoted = link_citations(render_markdown("“doi:10.1000/abc(2)”"), resolve)
    assert '>doi:10.1000/abc(2)</a>”' in quoted


def test_citations_inside_links_code_pre_styles_and_svg_stay_text():
    """Do citations in a link, code, preformatted text, a style and SVG text stay as written?"""
    html = sanitize_result_html('<style>p>a{color:red}</style><p><a href="https://arxiv.org">arXiv:2401.01234</a> '
                                "<code>arXiv:2401.01234</code></p><pre>arXiv:2401.01234</pre>"
                                "<svg><text>arXiv:2401.01234</text></svg><p>arXiv:2401.01234</p>")
    resolve, _calls = _resolver({PAPER: ("/library/a", "A")})
    out = link_citations(html, resolve, new_tab=True)
    assert out.count('href="/library/a"') == 1 and 'target="_blank">arXiv:2401.01234</a></p>' in out
    assert "<pre>arXiv:2401.01234</pre>" in out and "<text>arXiv:2401.01234</text>" in out
    assert "p>a { color: red }" in out  # the style kept as stored, not escaped


def test_words_that_only_contain_a_citation_are_not_citations():
    """Are `xarXiv:…`, a path ending in one, and an over-long id left alone (no resolver call)?"""
    resolve, calls = _resolver({PAPER: ("/library/a", "A")})
    html = render_markdown("xarXiv:2401.01234 /arXiv:2401.01234 arXiv:2401.012345 doi:10.1/short")
    assert link_citations(html, resolve) == html and calls == []


def test_hostile_titles_and_text_stay_inert():
    """Does a title with quotes and tags stay one attribute, and text that looks like markup stay text?"""
    html = render_markdown('arXiv:2401.01234"><script>alert(1)</script> &lt;b&gt; &amp; <b>x</b>')
    resolve, _calls = _resolver({PAPER: ("/library/a", "A\" onmouseover=\"alert(1)' <b>")})
    out = link_citations(html, resolve)
    assert "<script" not in out and "onmouseover=\"alert" not in out.replace("&quot;", "")
    assert 'title="A&quot; onmouseover=&quot;alert(1)\' &lt;b>"' in out
    assert "&lt;b&gt; &amp; <b>x</b>" in out  # entities are not escaped twice


def test_text_without_citations_is_returned_as_is():
    """Is markup with no `arXiv:`/`doi:` returned unchanged, with no resolver call?"""
    resolve, calls = _resolver({})
    html = render_markdown("Plain &amp; simple, #12.")
    assert link_citations(html, resolve) == html and link_citations(None, resolve) == "" and calls == []


def test_relinking_experiments_keeps_entities():
    """Does turning experiment links back into text for a mentor keep `&amp;` and `&lt;` as they were?"""
    html = sanitize_result_html("<p>#4 &lt;x&gt; &amp; &quot;</p>")
    assert relink_experiment_refs(html, lambda n: None) == "<p>#4 &lt;x&gt; &amp; &quot;</p>"


def test_over_the_hostile_corpus_linking_adds_only_the_link():
    """For every hostile payload, sanitized by either policy and followed by a citation, does
    linking add exactly one link (removing it gives back the stored markup) and leave the
    markup inert apart from that link's own page address?"""
    def resolve(keys):
        return {key: ("/library/x", 'T"<>&') for key in keys}
    ours = re.compile(r'<a href="/library/x" class="library-ref" title=\'T"&lt;>&amp;\' '
                      r'rel="noopener noreferrer nofollow"(?: target="_blank")?>(arXiv:2401\.01234)</a>')
    linked = 0
    for payload in HOSTILE:
        for clean, new_tab in ((sanitize_result_html, True), (sanitize_html, False)):
            html = clean(payload + "<p>see arXiv:2401.01234 here</p>")
            out = link_citations(html, resolve, new_tab=new_tab)
            linked += out != html
            # An unclosed element that swallows what follows it (`<script>…`) takes the citation with it.
            assert len(ours.findall(out)) == html.count("arXiv:2401.01234") == 1 or out == html, (payload, out)
            assert ours.sub(r"\1", out) == html, payload
            if clean is sanitize_result_html:
                assert inert_problems(out) in ([], ["href='/library/x'"]), payload
    assert linked >= 2 * len(HOSTILE) - 4  # all but the payloads that swallow the citation
