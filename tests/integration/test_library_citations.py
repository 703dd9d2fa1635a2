"""Citations of papers (`arXiv:…`, `doi:…`) in plans, clean results, narratives and beliefs link
to the library's item when the library holds the work, on the owner's pages only; a share page
cites as text. One lookup per text however many citations, none for a work already looked up."""
from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from models import db
from services.core.actors import Actor
from services.research import beliefs, literature, narratives, projects
from services.results import results, shares
from services.workflow import experiments
from tests.integration.queries import counting_queries

OWNER = Actor("owner", None, "Owner")
AGENT = Actor("agent", None, "analyzer")
PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
TWO_POD = (PLANS / "two_pod_seed_sweep.md").read_text()


def _paper(app, title="Sparse probes find features", **fields) -> str:
    """A paper in the library; its id."""
    with app.app_context():
        item = literature.add({"title": title, "authors": ["Ada Lovelace"], **fields}).item
        db.session.commit()
        return str(item.id)


def _library_link(item_id: str, text: str, title: str) -> str:
    return (f'<a href="/library/{item_id}" class="library-ref" title="{title}" '
            f'rel="noopener noreferrer nofollow">{text}</a>')


def test_a_plan_links_cited_papers_in_the_library_and_leaves_others_text(app, client, owner, make_experiment):
    """Does a plan citing one paper in the library (with a version) and one not in it show the
    first as a link to its library page, titled, and the second as text?"""
    item_id = _paper(app, arxiv_id="2401.01234")
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    plan = TWO_POD.replace("## Hypothesis\n", "## Hypothesis\nAs arXiv:2401.01234v2 found (unlike arXiv:2402.00001), "
                           "seeds matter.\n", 1)
    client.post(f"/experiments/{number}/plan", data={"markdown": plan, "csrf_token": owner.csrf()})
    page = client.get(f"/experiments/{number}").text
    assert "As " + _library_link(item_id, "arXiv:2401.01234v2", "Sparse probes find features") + " found" in page
    assert "(unlike arXiv:2402.00001)" in page


def test_a_clean_result_links_a_doi_in_a_new_tab_from_its_frame(app, client, owner, make_experiment):
    """Does a clean result citing a DOI (any case, before a full stop) link it, opening a new
    tab from the sandboxed frame, and leave the citation inside `<code>` as text?"""
    item_id = _paper(app, title="Attention", doi="10.1000/xyz")
    number = make_experiment("Result", status="awaiting_promotion")
    with app.app_context():
        results.save_clean_result(experiments.get_experiment(number),
                                  "<h2>Finding</h2><p>As doi:10.1000/XYZ. <code>doi:10.1000/xyz</code></p>",
                                  AGENT, title="Finding (HIGH confidence)")
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    srcdoc = re.search(r'srcdoc="([^"]*)"', page).group(1)
    assert (f"&lt;a href=&#34;/library/{item_id}&#34; class=&#34;library-ref&#34; title=&#34;Attention&#34; "
            f"rel=&#34;noopener noreferrer nofollow&#34; target=&#34;_blank&#34;&gt;doi:10.1000/XYZ&lt;/a&gt;."
            in srcdoc), srcdoc
    assert "&lt;code&gt;doi:10.1000/xyz&lt;/code&gt;" in srcdoc


def test_narratives_and_beliefs_link_cited_papers_and_a_share_page_cites_as_text(app, client, owner, make_experiment):
    """Do a published narrative and a belief's text link a cited paper on the owner's pages,
    while the project's share page shows the same citations as plain text (no /library link)?"""
    item_id = _paper(app, title="Probes <i>and</i> \"quotes\"", arxiv_id="2401.01234")
    with app.app_context():
        project = projects.create_project({"title": "Probing"}, OWNER)
        belief = beliefs.create_belief({"title": "Probes work", "current_belief": "Per arXiv:2401.01234, they do.",
                                        "status": "active", "project": project.slug}, OWNER)
        published = narratives.save_draft(project, "The story so far: arXiv:2401.01234.", OWNER)
        narratives.publish(project, published.version, OWNER)
        _link, token = shares.create_link(scope="project", project=project)
        slug, belief_number = project.slug, belief.number
        db.session.commit()
    for path in (f"/p/{slug}", f"/p/{slug}/narrative", f"/beliefs/{belief_number}"):
        page = client.get(path).text
        assert f'href="/library/{item_id}" class="library-ref"' in page, path
        # The serializer quotes a value holding `"` with `'`; `<` is escaped, so nothing opens a tag.
        assert 'class="library-ref" title=\'Probes &lt;i>and&lt;/i> "quotes"\'' in page, path
    shared = app.test_client().get(f"/s/{token}").text
    assert "The story so far: arXiv:2401.01234." in shared and "Per arXiv:2401.01234, they do." in shared
    assert "/library" not in shared and "library-ref" not in shared


def test_a_shared_result_cites_as_text(app, client, owner, make_experiment):
    """Does a result shared with a mentor show a library paper's citation as text, not a link into /library?"""
    _paper(app, arxiv_id="2401.01234")
    number = make_experiment("Result", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, "<h2>Finding</h2><p>As arXiv:2401.01234 &amp; others.</p>", AGENT,
                                  title="Finding (HIGH confidence)")
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        _link, token = shares.create_link(scope="experiment", experiment=experiment)
        db.session.commit()
    shared = app.test_client().get(f"/s/{token}").text
    assert "As arXiv:2401.01234 &amp;amp; others." in shared  # the text, escaped once more for srcdoc
    assert "/library/" not in shared


def test_citations_cost_one_lookup_per_text_however_many(app, client, owner):
    """Does a narrative citing ten papers (some twice, some not in the library) cost the page the
    same number of queries as one citing a single paper — one lookup, not one per citation?"""
    ids = [_paper(app, title=f"Paper {n}", arxiv_id=f"2401.0000{n}") for n in range(10)]
    with app.app_context():
        one = projects.create_project({"title": "One"}, OWNER)
        many = projects.create_project({"title": "Many"}, OWNER)
        for project, body in ((one, "See arXiv:2401.00000."),
                              (many, " ".join(f"arXiv:2401.0000{n} and arXiv:2401.0000{n}v2, doi:10.9/none{n};"
                                              for n in range(10)))):
            draft = narratives.save_draft(project, body, OWNER)
            narratives.publish(project, draft.version, OWNER)
        db.session.commit()
        slugs = one.slug, many.slug
    counts = []
    for slug in slugs:
        client.get(f"/p/{slug}/narrative")  # warm: the session's own reads
        with counting_queries() as statements:
            page = client.get(f"/p/{slug}/narrative").text
        counts.append(len([s for s in statements if "literature_items" in s]))
    assert counts == [1, 1]
    assert all(f'href="/library/{item_id}"' in page for item_id in ids)
    assert "doi:10.9/none3;" in page


def test_a_page_without_citations_looks_nothing_up(app, client, owner):
    """Does a narrative with no `arXiv:`/`doi:` in it cost no library query?"""
    with app.app_context():
        project = projects.create_project({"title": "Plain"}, OWNER)
        draft = narratives.save_draft(project, "Nothing cited here, only #12 and https://example.org.", OWNER)
        narratives.publish(project, draft.version, OWNER)
        db.session.commit()
        slug = project.slug
    with counting_queries() as statements:
        assert client.get(f"/p/{slug}/narrative").status_code == 200
    assert not [s for s in statements if "literature_items" in s]


def test_hostile_text_around_citations_stays_inert(app, client, owner):
    """Do citations inside links, code, preformatted text and attribute-like text stay as
    they are, with nothing the text wrote becoming markup?"""
    item_id = _paper(app, arxiv_id="2401.01234")
    body = ('[arXiv:2401.01234](https://example.org) `arXiv:2401.01234`\n\n```\narXiv:2401.01234\n```\n\n'
            'arXiv:2401.01234"><script>alert(1)</script> <img src=x onerror=alert(1)>arXiv:2401.01234 '
            'xarXiv:2401.01234 arXiv:2401.012345')
    with app.app_context():
        project = projects.create_project({"title": "Hostile"}, OWNER)
        draft = narratives.save_draft(project, body, OWNER)
        narratives.publish(project, draft.version, OWNER)
        db.session.commit()
        slug = project.slug
    page = client.get(f"/p/{slug}/narrative").text
    body_html = page.split('narrative-body">', 1)[1].split("</div>", 1)[0]
    assert body_html.count(f'href="/library/{item_id}"') == 2, body_html
    assert "<script>" not in body_html and "onerror" not in body_html
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">arXiv:2401.01234</a>' in body_html
    assert "<code>arXiv:2401.01234</code>" in body_html and "xarXiv:2401.01234" in body_html
    assert "arXiv:2401.012345" in body_html
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(sa.text("literature_items"))) == 1
