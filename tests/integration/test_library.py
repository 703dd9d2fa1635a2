"""The literature library (SPEC §11.3): adding by identifier against loopback fakes of arXiv,
Crossref and Semantic Scholar, by hand, duplicates merging, BibTeX, Zotero, feeds, search
(PostgreSQL here, SQLite FTS5 in its own test) and the pages."""
from __future__ import annotations


import pytest
import sqlalchemy as sa

from models import LiteratureFeed, LiteratureItem, Setting, db
from tests.conftest import csrf_from
from tests.fakes.literature_server import FakeLiterature


@pytest.fixture
def fake_literature(app):
    """The metadata sources and Zotero at a loopback fake, for this test."""
    with FakeLiterature() as fake:
        saved = {key: app.config.get(key) for key in fake.config()}
        app.config.update(fake.config())
        try:
            yield fake
        finally:
            app.config.update(saved)


def _csrf(client) -> str:
    return csrf_from(client.get("/library").text)


def _post(client, url, data=None, **kwargs):
    return client.post(url, data={"csrf_token": _csrf(client), **(data or {})}, **kwargs)


def _items(app) -> list[LiteratureItem]:
    with app.app_context():
        rows = list(db.session.scalars(sa.select(LiteratureItem).order_by(LiteratureItem.created_at)))
        db.session.expunge_all()
        return rows


def test_adding_an_arxiv_id_reads_arxivs_metadata(app, client, owner, fake_literature):
    """Does pasting an arXiv id (with a version) add the paper with arXiv's title, authors and abstract?"""
    fake_literature.arxiv["2401.01234"] = ("Sparse probes find features", ["Ada Lovelace", "Alan Turing"],
                                           "We probe.")
    response = _post(client, "/library/add", {"identifier": "arXiv:2401.01234v3"})
    assert response.status_code == 303
    [item] = _items(app)
    assert (item.title, item.authors, item.arxiv_id, item.abstract, item.source, item.read_state) == (
        "Sparse probes find features", ["Ada Lovelace", "Alan Turing"], "2401.01234", "We probe.", "arxiv", "unread")
    page = client.get(response.headers["Location"])
    assert page.status_code == 200 and "Sparse probes find features" in page.text and "We probe." in page.text


def test_an_unknown_arxiv_id_shows_the_manual_form_prefilled(app, client, owner, fake_literature):
    """Does an id arXiv does not have (an empty feed) say so and open the manual form with the id in it?"""
    response = _post(client, "/library/add", {"identifier": "2401.99999"})
    assert response.status_code == 422
    assert "arXiv knows no paper 2401.99999" in response.text
    assert 'value="2401.99999"' in response.text and '<details class="more" open' in response.text
    assert _items(app) == []


def test_a_doi_that_resolves_to_nothing_adds_nothing(app, client, owner, fake_literature):
    """Does a DOI neither Crossref (404) nor Semantic Scholar (404) knows answer with a clear sentence?"""
    response = _post(client, "/library/add", {"identifier": "https://doi.org/10.9999/NOPE"})
    assert response.status_code == 422
    assert "Crossref knows no DOI 10.9999/nope" in response.text
    assert _items(app) == []


def test_a_doi_crossref_knows_is_added_once(app, client, owner, fake_literature):
    """Does a Crossref DOI add the work with Crossref's fields, and a second paste find it without a second row?"""
    fake_literature.crossref["10.1000/xyz"] = {
        "DOI": "10.1000/XYZ", "title": ["Attention is  all you need"], "type": "proceedings-article",
        "author": [{"given": "Ashish", "family": "Vaswani"}], "issued": {"date-parts": [[2017, 6]]},
        "container-title": ["NeurIPS"], "abstract": "<jats:p>Transformers.</jats:p>", "URL": "https://doi.org/10.1000/xyz"}
    assert _post(client, "/library/add", {"identifier": "doi:10.1000/XYZ"}).status_code == 303
    again = _post(client, "/library/add", {"identifier": "10.1000/xyz"}, follow_redirects=True)
    assert "Already in the library" in again.text
    [item] = _items(app)
    assert (item.title, item.year, item.venue, item.abstract, item.doi) == (
        "Attention is all you need", 2017, "NeurIPS", "Transformers.", "10.1000/xyz")


def test_crossref_rate_limit_says_how_long_to_wait(app, client, owner, fake_literature):
    """Does Crossref's 429 with Retry-After become a sentence naming the wait, and nothing added?"""
    fake_literature.fail["/crossref"] = (429, {"Retry-After": "30", "Content-Type": "text/plain"}, b"Too many")
    response = _post(client, "/library/add", {"identifier": "10.1000/abc"})
    assert response.status_code == 422 and "wait 30 s" in response.text
    assert _items(app) == []


def test_semantic_scholar_429_and_404_for_a_url(app, client, owner, fake_literature):
    """Does a URL go to Semantic Scholar, its 404 and 429 answer clearly, and a known URL add the paper?"""
    url = "https://www.semanticscholar.org/paper/abc"
    assert "Semantic Scholar knows no such paper" in _post(client, "/library/add", {"identifier": url}).text
    fake_literature.s2[f"URL:{url}"] = {"paperId": "abc", "title": "A paper", "authors": [{"name": "Grace Hopper"}],
                                        "year": 2020, "venue": "ICML", "abstract": None,
                                        "externalIds": {"DOI": "10.5555/q", "ArXiv": "2001.00001"}, "url": url}
    fake_literature.fail["/s2"] = (429, {"Content-Type": "application/json"}, b'{"message": "Too Many Requests"}')
    assert "limiting requests" in _post(client, "/library/add", {"identifier": url}).text
    del fake_literature.fail["/s2"]
    assert _post(client, "/library/add", {"identifier": url}).status_code == 303
    [item] = _items(app)
    assert (item.s2_id, item.doi, item.arxiv_id, item.authors) == ("abc", "10.5555/q", "2001.00001", ["Grace Hopper"])


def test_offline_sources_leave_the_manual_form(app, client, owner):
    """With arXiv unreachable, is the owner told so and handed the manual form, which always works?"""
    app.config["SAGAN_ARXIV_API_URL"], saved = "http://127.0.0.1:9/api/query", app.config["SAGAN_ARXIV_API_URL"]
    try:
        response = _post(client, "/library/add", {"identifier": "2401.01234"})
    finally:
        app.config["SAGAN_ARXIV_API_URL"] = saved
    assert response.status_code == 422 and "could not be reached" in response.text
    assert "Enter by hand" in response.text
    made = _post(client, "/library/items", {"title": "Typed by hand", "authors": "Ada Lovelace\nAlan Turing",
                                            "arxiv_id": "2401.01234", "type": "paper", "year": "2024"})
    assert made.status_code == 303
    [item] = _items(app)
    assert item.authors == ["Ada Lovelace", "Alan Turing"] and item.source == "manual"


def test_same_title_and_first_author_merge_and_fill_what_was_missing(app, client, owner):
    """Does a second add of the same title and first author (case and punctuation aside) fill the
    first item's empty fields instead of making a row, and the form link to it?"""
    _post(client, "/library/items", {"title": "Grokking: Generalization", "authors": "Alethea Power"})
    response = _post(client, "/library/items", {"title": "grokking generalization", "authors": "Power, Alethea",
                                                "abstract": "Late generalization.", "doi": "10.1000/g"},
                     follow_redirects=True)
    assert "Already in the library" in response.text
    [item] = _items(app)
    assert (item.title, item.abstract, item.doi) == ("Grokking: Generalization", "Late generalization.", "10.1000/g")
    assert f"/library/{item.id}" in response.text


@pytest.mark.parametrize("field, value, message", [
    ("type", "podcast", "Unknown type"), ("read_state", "skimmed", "Unknown read state"),
    ("year", "last year", "The year is a number"), ("doi", "not-a-doi", "not a DOI"),
    ("url", "javascript:alert(1)", "must start with https://"), ("title", "", "Give the title"),
])
def test_bad_manual_input_is_refused_with_nothing_added(app, client, owner, field, value, message):
    """Does each bad field re-show the form with a sentence (422) and add nothing?"""
    response = _post(client, "/library/items", {"title": "A title", field: value})
    assert response.status_code == 422 and message in response.text
    assert _items(app) == []


def test_a_5_mb_abstract_is_refused(app, client, owner, api_client):
    """Is a 5 MB abstract refused (the form's body limit; the API's field limit) with nothing stored?"""
    response = client.post("/library/items", data={"csrf_token": _csrf(client), "title": "Big",
                                                   "abstract": "x" * 5_000_000})
    assert response.status_code == 413
    api = api_client("read,write")
    refused = api.post("/api/literature", json={"title": "Big", "abstract": "x" * 1_000_000})
    assert refused.status_code == 400 and refused.json["field"] == "abstract"
    assert _items(app) == []


BIB = """@article{good1,
  title = {Deep {Learning} for Things},
  author = {Doe, Jane and Roe, Richard},
  year = {2021},
  journal = {J. Things},
  doi = {10.1234/DEEP}
}

@article{broken1, title = {Never closed, author = {X}

@misc{good2, title = "Second paper", author = "M{\\"u}ller, Hans", year = 2019, eprint = {1901.00001}}

@inproceedings{broken2 title = {no comma}}
"""


def test_bibtex_import_keeps_what_parses_and_reports_broken_entries_by_line(app, client, owner):
    """Are the good entries added (LaTeX accents read) and each broken one reported with its line?"""
    response = client.post("/library/import/bibtex", data={"csrf_token": _csrf(client),
                                                           "file": (__import__("io").BytesIO(BIB.encode()), "x.bib")},
                           content_type="multipart/form-data", follow_redirects=True)
    assert response.status_code == 200
    assert "2 added" in response.text
    assert "line 9" in response.text and "line 13" in response.text
    items = {i.title: i for i in _items(app)}
    assert set(items) == {"Deep Learning for Things", "Second paper"}
    assert items["Deep Learning for Things"].authors == ["Jane Doe", "Richard Roe"]
    assert items["Deep Learning for Things"].doi == "10.1234/deep"
    assert items["Second paper"].authors == ["Hans Müller"] and items["Second paper"].arxiv_id == "1901.00001"


def test_a_5_mb_abstract_in_a_bibtex_file_is_cut_not_refused(app, client, owner):
    """Does a BibTeX upload past the usual request limit import, its 5 MB abstract cut to the field's limit?"""
    big = "@article{big, title={Huge abstract}, author={Doe, Jane}, abstract={" + "word " * 1_000_000 + "}}\n"
    response = client.post("/library/import/bibtex", data={"csrf_token": _csrf(client),
                                                           "file": (__import__("io").BytesIO(big.encode()), "b.bib")},
                           content_type="multipart/form-data", follow_redirects=True)
    assert response.status_code == 200 and "1 added" in response.text
    [item] = _items(app)
    assert len(item.abstract) == 100_000


def test_a_bibtex_upload_past_its_own_limit_is_refused_with_413(app, client, owner):
    """Is an upload over SAGAN_LITERATURE_IMPORT_MAX_BYTES refused (413) before it is read, nothing added?"""
    csrf = _csrf(client)
    saved, app.config["LITERATURE_IMPORT_MAX_BYTES"] = app.config["LITERATURE_IMPORT_MAX_BYTES"], 3_000_000
    try:
        response = client.post("/library/import/bibtex", data=b"x" * 3_000_001, headers={"X-CSRFToken": csrf},
                               content_type="application/x-www-form-urlencoded")
    finally:
        app.config["LITERATURE_IMPORT_MAX_BYTES"] = saved
    assert response.status_code == 413
    assert _items(app) == []


def test_an_empty_or_missing_bibtex_file_is_refused(app, client, owner):
    """Does an upload with no file, or an empty one, say so (422) and add nothing?"""
    assert "Choose a .bib file" in _post(client, "/library/import/bibtex").text
    empty = client.post("/library/import/bibtex", data={"csrf_token": _csrf(client),
                                                        "file": (__import__("io").BytesIO(b"  "), "e.bib")},
                        content_type="multipart/form-data")
    assert empty.status_code == 422 and "The file is empty" in empty.text


def _bibtex_library(count: int, start: int = 0) -> str:
    return "\n".join(f"@article{{k{i}, title={{Paper {i} on things}}, author={{Doe, Jane and Roe, Rich}}, "
                     f"year={{2020}}, journal={{J}}, abstract={{An abstract {i}.}}}}" for i in range(start, start + count))


def test_a_large_bibtex_import_takes_as_few_statements_as_a_small_one(app, app_ctx):
    """Do 5,000 entries (and their re-import, which merges all of them) import completely in
    about as many SQL statements as 500 — batched, not one round trip per entry? (Its time,
    well under 5 s, is measured in bench/bench_bibtex_import.py, not here.)"""
    from services.research import bibtex
    from tests.integration.queries import counting_queries
    with counting_queries() as small:
        report = bibtex.import_bibtex(_bibtex_library(500, start=100_000))
        db.session.commit()
    assert (report.added, report.problems) == (500, [])
    text = _bibtex_library(5000)
    with counting_queries() as large:
        report = bibtex.import_bibtex(text)
        db.session.commit()
    assert (report.added, report.problems) == (5000, [])
    with counting_queries() as again_statements:
        again = bibtex.import_bibtex(text)
        db.session.commit()
    assert (again.added, again.merged) == (0, 5000)
    assert len(large) <= len(small) + 20, (len(small), len(large))
    assert len(again_statements) <= len(small) + 20, (len(small), len(again_statements))


def test_an_import_mixing_identifiers_inserts_in_a_few_statements(app, app_ctx):
    """Do entries with a DOI, an arXiv id or neither, alternating, go in as a few multi-row
    INSERTs rather than one statement per change of shape?"""
    from services.research import bibtex
    from tests.integration.queries import counting_queries
    ids = ("doi={{10.5555/x.{i}}}", "eprint={{2101.{i:05d}}}, archiveprefix={{arXiv}}", "note={{none}}")
    text = "\n".join(f"@article{{k{i}, title={{Paper {i}}}, author={{Doe, Jane}}, year={{2020}}, "
                     + ids[i % 3].format(i=i) + "}" for i in range(300))
    with counting_queries() as statements:
        report = bibtex.import_bibtex(text)
    db.session.commit()
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT INTO LITERATURE_ITEMS")]
    assert report.added == 300 and len(inserts) <= 2, len(inserts)
    assert db.session.scalar(sa.select(sa.func.count()).where(LiteratureItem.doi.is_not(None))) == 100


def test_bibtex_export_round_trips(app, client, owner):
    """Does the export carry every item (or the filtered ones), and import back as the same works?"""
    _post(client, "/library/items", {"title": "One", "authors": "Ada Lovelace", "year": "2020", "doi": "10.1000/one"})
    _post(client, "/library/items", {"title": "Two", "authors": "Alan Turing", "type": "blog_post"})
    everything = client.get("/library/export.bib")
    assert everything.status_code == 200 and "attachment" in everything.headers["Content-Disposition"]
    assert "10.1000/one" in everything.text and "{Two}" in everything.text
    only_posts = client.get("/library/export.bib?type=blog_post").text
    assert "{Two}" in only_posts and "{One}" not in only_posts
    with app.app_context():
        from services.research import bibtex
        report = bibtex.import_bibtex(everything.text)
        assert (report.added, report.merged) == (0, 2)


def _zotero_item(n: int, **data) -> dict:
    return {"key": f"K{n}", "version": 1, "data": {"itemType": "journalArticle", "title": f"Zotero paper {n}",
                                                   "creators": [{"creatorType": "author", "firstName": "Ann",
                                                                 "lastName": f"Author{n}"}],
                                                   "date": "2022-03-01", "tags": [{"tag": "ml"}], **data}}


def test_zotero_import_reads_every_page(app, client, owner, fake_literature):
    """Does the import follow Link rel=next over pages, skip notes, and never show the key back?"""
    fake_literature.zotero_items = [_zotero_item(i) for i in range(5)] + [
        {"key": "N", "version": 1, "data": {"itemType": "note", "note": "x"}},
        _zotero_item(9, DOI="10.7777/z", extra="arXiv: 2201.00001")]
    saved = _post(client, "/settings/zotero", {"library_type": "user", "library_id": "12345",
                                               "api_key": fake_literature.zotero_key})
    assert saved.status_code == 303
    assert fake_literature.zotero_key not in client.get("/settings").text
    response = _post(client, "/library/import/zotero", follow_redirects=True)
    assert "6 added, 0 merged" in response.text and "1 skipped" in response.text
    assert len([r for r in fake_literature.requests if r.startswith("/zotero/users/12345/items/top")]) == 4
    by_title = {i.title: i for i in _items(app)}
    assert by_title["Zotero paper 9"].arxiv_id == "2201.00001" and by_title["Zotero paper 9"].tags == ["ml"]


def test_a_refused_zotero_key_writes_nothing(app, client, owner, fake_literature):
    """Does Zotero's 403 for the key become a clear sentence, with nothing imported?"""
    fake_literature.zotero_items = [_zotero_item(1)]
    _post(client, "/settings/zotero", {"library_type": "user", "library_id": "1", "api_key": "wrongkey000000000000"})
    response = _post(client, "/library/import/zotero")
    assert response.status_code == 422 and "Zotero refused the API key" in response.text
    assert _items(app) == []


def test_zotero_settings_refuse_bad_input(app, client, owner):
    """Are a non-numeric library id and a malformed key refused (422), nothing saved?"""
    response = _post(client, "/settings/zotero", {"library_type": "user", "library_id": "me", "api_key": "abc"})
    assert response.status_code == 422 and "library id" in response.text
    with app.app_context():
        assert db.session.get(Setting, "zotero_library_id") is None


RSS = """<?xml version="1.0"?><rss version="2.0"><channel><title>Blog</title><link>https://blog.example</link>
<item><title>A post about probes</title><link>https://blog.example/probes</link><author>me@example.com (Sam)</author>
<description>&lt;p&gt;Probing &lt;b&gt;works&lt;/b&gt;.&lt;/p&gt;</description><pubDate>Tue, 01 Dec 2026 10:00:00 GMT</pubDate></item>
<item><title>An arXiv link</title><link>https://arxiv.org/abs/2411.00002</link></item>
</channel></rss>"""


def test_an_rss_feed_lands_new_items_unread_and_merges_on_the_next_poll(app, app_ctx, fake_literature, worker):
    """Does a poll (through the scheduler's job) add the feed's entries unread, and a second poll add none?"""
    from services.research import feeds
    fake_literature.feeds["blog.xml"] = ("application/rss+xml", RSS)
    feed = feeds.create_feed({"kind": "rss", "query": f"{fake_literature.url}/feeds/blog.xml", "label": "Blog"})
    db.session.commit()
    assert feeds.enqueue_due() == 1
    worker()
    db.session.expire_all()
    items = {i.title: i for i in db.session.scalars(sa.select(LiteratureItem))}
    assert items["A post about probes"].abstract == "Probing works ." or \
        items["A post about probes"].abstract.startswith("Probing")
    assert items["A post about probes"].type == "blog_post" and items["An arXiv link"].arxiv_id == "2411.00002"
    assert {i.read_state for i in items.values()} == {"unread"}
    feed = db.session.get(LiteratureFeed, feed.id)
    assert (feed.last_error, feed.items_added) == ("", 2) and feed.last_polled_at is not None
    assert feeds.enqueue_due() == 0  # polled just now
    assert feeds.poll(feed) == 0


def test_a_feed_that_is_not_a_feed_shows_the_error_and_writes_nothing(app, client, owner, fake_literature):
    """Does an HTML page subscribed as a feed leave the error on the feed and no item?"""
    fake_literature.feeds["page.html"] = ("text/html", "<html><body><p>Hello, not a feed</p></body></html>")
    with app.app_context():
        from services.research import feeds
        feed = feeds.create_feed({"kind": "rss", "query": f"{fake_literature.url}/feeds/page.html"})
        feeds.poll(feed)
        db.session.commit()
    assert _items(app) == []
    assert "Last poll failed: That URL is not an RSS or Atom feed" in client.get("/library").text


def test_an_arxiv_category_feed_adds_papers(app, app_ctx, fake_literature):
    """Does a category feed ask arXiv for cat:… and add what it answers?"""
    from services.research import feeds
    fake_literature.arxiv["2412.00001"] = ("New in cs.LG", ["Yoshua Bengio"], "Fresh.")
    feed = feeds.create_feed({"kind": "arxiv_category", "query": "cs.LG"})
    assert feeds.poll(feed) == 1
    assert any("search_query=cat%3Acs.LG" in r for r in fake_literature.requests)


@pytest.mark.parametrize("form, message", [
    ({"kind": "podcast", "query": "x"}, "Unknown feed kind"), ({"kind": "arxiv_category", "query": "not a cat!"},
                                                               "arXiv category"),
    ({"kind": "rss", "query": "ftp://x.example/feed"}, "must start with"), ({"kind": "rss", "query": ""}, "Give the"),
])
def test_bad_feeds_are_refused(app, client, owner, form, message):
    """Is each bad feed refused with a sentence (422) and nothing saved?"""
    response = _post(client, "/library/feeds", form)
    assert response.status_code == 422 and message in response.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(LiteratureFeed)) == 0


def _seed(app):
    from services.research import literature
    with app.app_context():
        literature.add({"title": "Sparse autoencoders on language models", "authors": ["Hoagy Cunningham"],
                        "abstract": "Dictionary learning finds interpretable features.", "type": "paper"})
        literature.add({"title": "Why I like probes", "authors": ["Sam Marks"], "type": "blog_post",
                        "notes": "Compare with the dictionary results", "read_state": "read"})
        literature.add({"title": "Scaling laws", "authors": ["Jared Kaplan"], "abstract": "Loss follows power laws."})
        db.session.commit()


def test_search_covers_titles_abstracts_notes_and_authors_with_filters(app, client, owner):
    """Does the search find words in the abstract, the notes and the authors, stemmed, and do filters narrow it?"""
    _seed(app)
    page = client.get("/library?q=dictionary")
    assert "Sparse autoencoders" in page.text and "Why I like probes" in page.text and "Scaling laws" not in page.text
    assert "Scaling laws" in client.get("/library?q=kaplan").text
    assert "Scaling laws" in client.get("/library?q=law").text  # stemmed: laws
    narrowed = client.get("/library?q=dictionary&type=blog_post").text
    assert "Why I like probes" in narrowed and "Sparse autoencoders" not in narrowed
    assert "Why I like probes" not in client.get("/library?read_state=unread").text
    assert "Nothing matches" in client.get("/library?q=zebra").text


def test_search_fragment_and_bad_filters(app, htmx_client):
    """Does an htmx search get only the list, and an unknown filter a 400 with the reason?"""
    _seed(app)
    fragment = htmx_client.get("/library?q=scaling")
    assert fragment.status_code == 200 and "<h1>" not in fragment.text and "Scaling laws" in fragment.text
    bad = htmx_client.get("/library?read_state=skimmed", headers={"HX-Request": "false"})
    assert bad.status_code == 400 and "Unknown read state" in bad.text


def test_the_empty_library_says_how_to_start(app, client, owner):
    """Does an empty library say how to add the first item?"""
    page = client.get("/library")
    assert page.status_code == 200 and "The library is empty" in page.text and "No feeds yet" in page.text


def test_read_state_quick_action_and_notes_edit(app, client, owner, htmx_client):
    """Do the quick actions move the read state, htmx getting the state fragment, and do edits save?"""
    _seed(app)
    item = next(i for i in _items(app) if i.title == "Scaling laws")
    assert _post(client, f"/library/{item.id}/read-state", {"read_state": "queued", "back": "list"}).status_code == 303
    swapped = htmx_client.post(f"/library/{item.id}/read-state", data={"read_state": "reading"},
                               headers={"X-CSRFToken": htmx_client.csrf})
    assert swapped.status_code == 200 and "<h1>" not in swapped.text and "reading" in swapped.text
    refused = _post(client, f"/library/{item.id}/read-state", {"read_state": "skimmed"})
    assert refused.status_code == 422 and "Unknown read state" in refused.text
    saved = _post(client, f"/library/{item.id}", {"notes": "**Key** paper <script>x</script>", "tags": "scaling, ML"})
    assert saved.status_code == 303
    page = client.get(f"/library/{item.id}").text
    assert "<strong>Key</strong>" in page and "<script>x" not in page
    [row] = [i for i in _items(app) if i.id == item.id]
    assert (row.read_state, row.tags) == ("reading", ["scaling", "ml"])
    assert client.get("/library/not-an-id").status_code == 404


def test_sqlite_search_uses_fts5(tmp_path):
    """On the embedded default (SQLite), does the FTS5 table find words in abstracts and notes, and follow edits?"""
    import flask_migrate

    from services.research import literature
    from tests.integration.test_migrations import MIGRATIONS, _scratch_app
    lite = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    try:
        with lite.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS)
            _seed(lite)
            found = literature.search(literature.Filters(query="dictionary"))
            assert {i.title for i in found} == {"Sparse autoencoders on language models", "Why I like probes"}
            scaling = literature.search(literature.Filters(query="power"))[0]
            literature.update(scaling, {"notes": "zebra crossing"})
            db.session.commit()
            assert [i.title for i in literature.search(literature.Filters(query="zebra"))] == ["Scaling laws"]
            assert literature.search(literature.Filters(query='"unbalanced AND (')) == []
    finally:
        with lite.app_context():
            db.session.remove()
            db.engine.dispose()


def test_the_api_creates_searches_and_patches(app, api_client, fake_literature):
    """Can a token create by fields and by identifier, search, read and patch, with duplicates merged?"""
    api = api_client("read,write")
    made = api.post("/api/literature", json={"title": "Probing classifiers", "authors": ["Yonatan Belinkov"],
                                             "abstract": "Probes and their limits.", "readState": "queued"})
    assert made.status_code == 201 and made.json["created"] is True
    item_id = made.json["item"]["id"]
    again = api.post("/api/literature", json={"title": "probing classifiers", "authors": ["Belinkov, Yonatan"],
                                              "doi": "10.1162/coli_a_00422"})
    assert again.status_code == 200 and again.json["created"] is False and again.json["item"]["id"] == item_id
    fake_literature.arxiv["2402.00002"] = ("From arXiv", ["Chris Olah"], "Circuits.")
    by_id = api.post("/api/literature", json={"identifier": "2402.00002"})
    assert by_id.status_code == 201 and by_id.json["item"]["arxivId"] == "2402.00002"
    missing = api.post("/api/literature", json={"identifier": "10.9999/none"})
    assert missing.status_code == 422 and missing.json["error"] == "lookup_failed"
    found = api.get("/api/literature?q=limits").json["items"]
    assert [i["id"] for i in found] == [item_id] and found[0]["doi"] == "10.1162/coli_a_00422"
    assert api.get("/api/literature?readState=queued").json["items"][0]["id"] == item_id
    patched = api.patch(f"/api/literature/{item_id}", json={"notes": "Read twice.", "readState": "read", "score": 0.9})
    assert patched.status_code == 200 and patched.json["item"]["readState"] == "read"
    assert api.get(f"/api/literature/{item_id}").json["item"]["notes"] == "Read twice."


@pytest.mark.parametrize("body, field", [
    ({"title": "x", "readState": "skimmed"}, "read_state"), ({"title": "x", "type": "podcast"}, "type"),
    ({"title": "x", "color": "red"}, "color"), ({"title": "x", "authors": "x" * 400}, "authors"),
    ({"title": "x", "score": "high"}, "score"), ({"title": "x", "projectId": "nope"}, "project_id"),
    ({"identifier": 5}, "identifier"),
])
def test_the_api_refuses_bad_fields(app, api_client, body, field):
    """Is each bad field a 400 naming it, with nothing stored?"""
    response = api_client("read,write").post("/api/literature", json=body)
    assert response.status_code == 400 and response.json["field"] == field, response.json
    assert _items(app) == []


def test_the_api_needs_the_right_scope(app, api_client):
    """Does a read token list but not create, and an unknown filter answer 400?"""
    reader = api_client("read")
    assert reader.get("/api/literature").status_code == 200
    assert reader.post("/api/literature", json={"title": "x"}).status_code == 403
    assert reader.get("/api/literature?type=podcast").status_code == 400
    assert reader.get(f"/api/literature/{'0' * 32}").status_code == 404


def test_subscribing_polls_at_once_and_a_feed_can_be_polled_again_or_removed(app, client, owner, fake_literature,
                                                                            worker):
    """Does subscribing queue a first poll, "Poll now" queue another, and removing keep the feed's items?"""
    fake_literature.feeds["blog.xml"] = ("application/rss+xml", RSS)
    made = _post(client, "/library/feeds", {"kind": "rss", "query": f"{fake_literature.url}/feeds/blog.xml",
                                            "label": "A blog"})
    assert made.status_code == 303
    worker()
    page = client.get("/library").text
    assert "A blog" in page and "2 added" in page and "A post about probes" in page
    with app.app_context():
        feed_id = db.session.scalar(sa.select(LiteratureFeed.id))
    assert _post(client, f"/library/feeds/{feed_id}/poll").status_code == 303
    assert "Polling “A blog”" in client.get("/library").text
    with app.app_context():
        first_poll = db.session.get(LiteratureFeed, feed_id).last_polled_at
    worker()
    with app.app_context():
        assert db.session.get(LiteratureFeed, feed_id).last_polled_at > first_poll
    assert _post(client, f"/library/feeds/{feed_id}/delete").status_code == 303
    with app.app_context():
        assert db.session.get(LiteratureFeed, feed_id) is None
    assert len(_items(app)) == 2
    assert _post(client, f"/library/feeds/{feed_id}/poll").status_code == 404


def test_a_feed_on_a_private_address_is_refused_unless_allowed(app, client, owner):
    """With private URLs not allowed, is a feed on 127.0.0.1 refused when saved, with nothing kept?"""
    app.config["SAGAN_ALLOW_PRIVATE_URLS"] = False
    try:
        response = _post(client, "/library/feeds", {"kind": "rss", "query": "https://127.0.0.1/feed.xml"})
    finally:
        app.config["SAGAN_ALLOW_PRIVATE_URLS"] = True
    assert response.status_code == 422 and "loopback" in response.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(LiteratureFeed)) == 0


def test_the_scheduler_tick_queues_due_feeds(app, app_ctx, fake_literature, worker):
    """Does one scheduler tick queue a poll for a feed never polled, which then lands its items?"""
    from services.research import feeds
    from workers import scheduler
    fake_literature.feeds["blog.xml"] = ("application/rss+xml", RSS)
    feeds.create_feed({"kind": "rss", "query": f"{fake_literature.url}/feeds/blog.xml"})
    db.session.commit()
    scheduler.tick(app)
    worker()
    db.session.expire_all()
    assert db.session.scalar(sa.select(sa.func.count()).select_from(LiteratureItem)) == 2


@pytest.mark.parametrize("prefix, answer, call, message", [
    ("/arxiv", (503, {"Content-Type": "text/plain"}, b"Rate exceeded."), ("arxiv", "2401.01234"), "answered 503"),
    ("/arxiv", (200, {"Content-Type": "text/plain"}, b"Rate exceeded."), ("arxiv", "2401.01234"),
     "not an Atom feed (Rate exceeded.)"),
    ("/nothing", None, ("arxiv", "junk-id"), "arXiv refused the query: incorrect id format"),
    ("/crossref", (200, {"Content-Type": "application/json"}, b'{"status": "ok", "message": '),
     ("crossref", "10.1000/x"), "not the JSON it documents"),
    ("/crossref", (200, {"Content-Type": "application/json"}, b'{"status": "ok", "message": {"title": []}}'),
     ("crossref", "10.1000/x"), "no title"),
    ("/s2", (200, {"Content-Type": "application/json"}, b'["not", "a", "paper"]'), ("s2", "URL:https://x.org/p"),
     "not the JSON it documents"),
])
def test_malformed_or_refusing_sources_fail_clearly(app, app_ctx, fake_literature, prefix, answer, call, message):
    """Does each malformed or refusing answer (arXiv throttling in plain text, arXiv's Error entry,
    broken JSON, a work without a title) become a LookupFailed with a clear sentence?"""
    from services.research import literature_sources as sources
    if answer:
        fake_literature.fail[prefix] = answer
    source, value = call
    lookup = {"arxiv": sources.lookup_arxiv, "crossref": sources.lookup_crossref,
              "s2": sources.lookup_semantic_scholar}[source]
    with pytest.raises(sources.LookupFailed) as failed:
        lookup(value)
    assert message in failed.value.message


def test_search_lists_matches_in_the_queue_order(app, app_ctx):
    """Does a search list what matches by the literature agent's score, unscored last, newest
    first among equals — the unread queue's order, the same on both databases?"""
    from services.research import literature
    for title, score in (("Probe low", 0.1), ("Probe unscored", None), ("Probe high", 0.9), ("Other", 0.5)):
        literature.add({"title": title, "score": score, "abstract": "about probes" if title != "Other" else ""})
    db.session.commit()
    found = [i.title for i in literature.search(literature.Filters(query="probes"))]
    assert found == ["Probe high", "Probe low", "Probe unscored"]
    assert [i.title for i in literature.search(literature.Filters(query="probes"), limit=1, offset=1)] == ["Probe low"]


def test_sqlite_search_walks_the_queue_index_for_many_matches(tmp_path, monkeypatch):
    """On SQLite, does a search past the walk threshold (which starts from the queue index) list
    the same items in the same order as one that starts from the FTS5 matches?"""
    import flask_migrate

    from services.research import literature
    from tests.integration.test_migrations import MIGRATIONS, _scratch_app
    lite = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    try:
        with lite.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS)
            for i in range(40):
                literature.add({"title": f"Paper {i}", "abstract": "sparse probes" if i % 3 else "dense",
                                "score": (i % 7) / 7 if i % 5 else None, "read_state": ("unread", "read")[i % 2]})
            db.session.commit()
            queries = [literature.Filters(query="probes"), literature.Filters(query="sparse probes", read_state="read")]
            from_matches = [[i.title for i in literature.search(f, limit=10)] for f in queries]
            monkeypatch.setattr(literature, "SQLITE_WALK_FROM_MATCHES", 0)
            walked = [[i.title for i in literature.search(f, limit=10)] for f in queries]
            plan = db.session.execute(sa.text(
                "EXPLAIN QUERY PLAN SELECT id FROM literature_items WHERE +literature_items.rowid IN "
                "(SELECT rowid FROM literature_fts WHERE literature_fts MATCH '\"probes\"') "
                "ORDER BY score DESC NULLS LAST, created_at DESC, id LIMIT 10")).all()
        assert walked == from_matches and len(walked[0]) == 10
        assert any(literature.QUEUE_INDEX in str(row) for row in plan), plan
    finally:
        with lite.app_context():
            db.session.remove()
            db.engine.dispose()


def test_postgres_search_uses_the_full_text_index(app, app_ctx):
    """Does the library's text query match the GIN index's expression (so PostgreSQL can use it)?"""
    from services.research import literature
    condition = literature.postgres_text_match("probe")
    query = sa.select(LiteratureItem.id).where(condition)
    sql = str(query.compile(db.engine, compile_kwargs={"literal_binds": True}))
    db.session.execute(sa.text("SET LOCAL enable_seqscan = off"))
    plan = "\n".join(row[0] for row in db.session.execute(sa.text("EXPLAIN " + sql)))
    db.session.rollback()
    assert "ix_literature_items_search" in plan, plan
