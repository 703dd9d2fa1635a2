"""Mentor share links (SPEC §8.5): created by the owner, shown once, hashed; read-only,
stateless, noindex, no-referrer, rate limited, counted; revoked or expired → 404."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from models import ShareLink, db
from services import clock, discussion, experiments, results, shares
from services.actors import Actor
from tests.conftest import csrf_from

HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
AGENT = Actor("agent", None, "analyzer")


def _result(app, make_experiment, title, status="shared", comment=None):
    number = make_experiment(title, status=status)
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, HTML, AGENT, title=title)
        if comment:
            discussion.post_comment("experiment", experiment, comment, Actor("owner", None, "Owner"))
        db.session.commit()
    return number


def _link(app, **fields):
    with app.app_context():
        if "number" in fields:
            fields["experiment"] = experiments.get_experiment(fields.pop("number"))
        link, token = shares.create_link(**fields)
        db.session.commit()
        return link.id, token


def test_owner_creates_a_link_on_settings_and_sees_it_once(app, client, owner, make_experiment):
    """Is the URL shown once (no-store), only a hash stored, and the list shows label and views?"""
    number = _result(app, make_experiment, "Result (HIGH confidence)")
    page = client.get("/settings")
    assert 'id="share-links"' in page.text
    response = client.post("/settings/share-links", data={
        "csrf_token": csrf_from(page.text), "scope": "experiment", "experiment": str(number),
        "label": "For Ada", "expires_in_days": "7"}, follow_redirects=True)
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    url = re.search(r'id="new-share-url" type="text" readonly value="([^"]+)"', response.text).group(1)
    token = url.rsplit("/", 1)[1]
    with app.app_context():
        link = db.session.scalar(sa.select(ShareLink))
        assert link.token_hash != token and len(link.token_hash) == 64 and token not in link.token_hash
        assert link.label == "For Ada" and link.expires_at is not None
    listed = client.get("/settings")
    assert token not in listed.text and "For Ada" in listed.text
    # Revoking asks first, and the form carries its CSRF token.
    assert f'action="/settings/share-links/{link.id}/revoke" data-confirm="Revoke the share link “For Ada”?' in listed.text
    assert csrf_from(listed.text)


def test_share_link_form_errors(app, client, owner, make_experiment):
    """Are an unknown experiment, a bad expiry and a missing experiment refused with a message?"""
    token = csrf_from(client.get("/settings").text)
    for data, message in (({"scope": "experiment", "experiment": "9999"}, "No experiment 9999."),
                          ({"scope": "experiment"}, "Choose the experiment to share."),
                          ({"scope": "all_promoted", "expires_in_days": "-3"}, "Expiry must be a whole number"),
                          ({"scope": "project"}, "Share one experiment or all promoted results.")):
        page = client.post("/settings/share-links", data={"csrf_token": token, **data}, follow_redirects=True)
        assert page.status_code == 200 and message in page.text, message
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(ShareLink.id))) == 0


def test_the_mentor_view_is_stateless_noindex_and_counted(app, client, make_experiment):
    """Does /s/<token> answer without setting or reading a cookie, with noindex, no-referrer and
    no-store, and count the view?"""
    number = _result(app, make_experiment, "Weight decay is not it (HIGH confidence)")
    link_id, token = _link(app, scope="experiment", number=number)
    mentor = app.test_client()
    mentor.set_cookie("session", "not-a-real-session")
    response = mentor.get(f"/s/{token}")
    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers and "Vary" not in response.headers
    assert response.headers["X-Robots-Tag"].startswith("noindex")
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert "no-store" in response.headers["Cache-Control"]
    assert '<meta name="robots" content="noindex' in response.text
    assert "Weight decay is not it" in response.text and "HIGH confidence" in response.text
    assert "srcdoc=" in response.text and "csrf" not in response.text.lower()
    with app.app_context():
        link = db.session.get(ShareLink, link_id)
        assert link.use_count == 1 and link.last_used_at is not None


def test_revoked_expired_and_unknown_links_are_the_same_404(app, client, owner, make_experiment):
    """Do a revoked link, an expired link and a made-up token all answer the same plain 404?"""
    number = _result(app, make_experiment, "Result (LOW confidence)")
    revoked_id, revoked = _link(app, scope="experiment", number=number)
    _id, expiring = _link(app, scope="experiment", number=number, expires_in_days=1)
    page = client.get("/settings")
    client.post(f"/settings/share-links/{revoked_id}/revoke", data={"csrf_token": csrf_from(page.text)})
    clock.advance(timedelta(days=2))
    mentor = app.test_client()
    bodies = set()
    for token in (revoked, expiring, "x" * 43, "short"):
        response = mentor.get(f"/s/{token}")
        assert response.status_code == 404 and "Set-Cookie" not in response.headers
        assert response.headers["X-Robots-Tag"].startswith("noindex")
        bodies.add(response.text)
    assert len(bodies) == 1 and "revoked" not in bodies.pop().lower()


def _promote(app, number):
    with app.app_context():
        results.promote(experiments.get_experiment(number), "shared", Actor("owner", None, "Owner"))
        db.session.commit()


def test_all_promoted_lists_only_shared_results_newest_first(app, client, make_experiment):
    """Does an "all promoted" link list shared results newest promotion first (title, confidence,
    excerpt) and open each, but not completed or unpromoted ones?"""
    first = _result(app, make_experiment, "First finding (LOW confidence)", status="awaiting_promotion")
    second = _result(app, make_experiment, "Second finding (HIGH confidence)", status="awaiting_promotion")
    kept = _result(app, make_experiment, "Kept private (MODERATE confidence)", status="completed")
    waiting = _result(app, make_experiment, "Not promoted (MODERATE confidence)", status="awaiting_promotion")
    _promote(app, first)
    clock.advance(timedelta(hours=1))
    _promote(app, second)
    clock.advance(timedelta(hours=1))
    with app.app_context():  # editing the first result later does not reorder the list
        results.save_clean_result(experiments.get_experiment(first), HTML.replace("0.6%", "0.5%"), AGENT)
        db.session.commit()
    _id, token = _link(app, scope="all_promoted", label="For the group")
    mentor = app.test_client()
    index = mentor.get(f"/s/{token}")
    assert index.status_code == 200 and "For the group" in index.text
    assert 0 < index.text.index("Second finding") < index.text.index("First finding")
    assert "Kept private" not in index.text and "Not promoted" not in index.text
    assert "Final validation loss differs by 0.6%" in index.text  # the one-line excerpt
    assert "HIGH confidence" in index.text and "LOW confidence" in index.text
    assert mentor.get(f"/s/{token}/{second}").status_code == 200
    for number in (kept, waiting, 99999):
        assert mentor.get(f"/s/{token}/{number}").status_code == 404


def test_nothing_beyond_the_shared_results_is_reachable(app, client, make_experiment):
    """Do share pages carry no forms and link only to themselves and other share pages, and does
    the token open nothing else (dashboard pages, the API, another experiment)?"""
    number = _result(app, make_experiment, "Shared (HIGH confidence)", comment="Private note @claude")
    other = _result(app, make_experiment, "Other (HIGH confidence)")
    _id, token = _link(app, scope="experiment", number=number)
    mentor = app.test_client()
    page = mentor.get(f"/s/{token}")
    assert "<form" not in page.text and "Private note" not in page.text  # comments only when included
    hrefs = set(re.findall(r'href="([^"]+)"', page.text))
    assert all(h.startswith(("/static/", f"/s/{token}")) for h in hrefs), hrefs
    assert mentor.get(f"/s/{token}/{other}").status_code == 404
    for path in (f"/experiments/{number}", "/settings", "/runs", "/approvals"):
        response = mentor.get(path)
        assert response.status_code == 302 and "/login" in response.headers["Location"]
    assert mentor.get(f"/api/experiments/{number}", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_comments_are_shown_only_when_the_link_includes_them(app, make_experiment):
    """Does include_comments show the discussion (read-only)?"""
    number = _result(app, make_experiment, "Shared (HIGH confidence)", comment="Is the gap real at 350M?")
    _id, token = _link(app, scope="experiment", number=number, include_comments=True)
    page = app.test_client().get(f"/s/{token}")
    assert "Is the gap real at 350M?" in page.text and "<form" not in page.text


def test_share_views_are_rate_limited_per_address(app, make_experiment, monkeypatch):
    """After the per-minute limit, does the same address get 429 (also for made-up tokens)?"""
    number = _result(app, make_experiment, "Shared (HIGH confidence)")
    _id, token = _link(app, scope="experiment", number=number)
    monkeypatch.setitem(app.config, "SHARE_RATE_LIMIT", 3)
    mentor = app.test_client()
    assert [mentor.get(f"/s/{token}").status_code for _ in range(3)] == [200, 200, 200]
    limited = mentor.get(f"/s/{'y' * 43}")
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "60"
    assert "Set-Cookie" not in limited.headers and limited.headers["X-Robots-Tag"].startswith("noindex")
    other = app.test_client().get(f"/s/{token}", environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert other.status_code == 200


def test_only_the_owner_manages_links(app, client, api_client, owner, make_experiment):
    """Can a token (even with every scope) not create or revoke share links?"""
    scripted = api_client("read,write,dispatch,promote")
    assert scripted.post("/settings/share-links", data={"scope": "all_promoted"}).status_code in (302, 401)
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(ShareLink.id))) == 0


def test_experiment_references_lead_mentors_only_to_results_they_can_open(app, make_experiment):
    """Does `#N` in a shared result link to N's share page when the link shares N, and stay plain
    text (no dashboard link a mentor cannot open) otherwise — in the result and the comments?"""
    import html as html_lib
    private = _result(app, make_experiment, "Private (LOW confidence)", status="completed")
    cited = _result(app, make_experiment, "Cited (HIGH confidence)", status="awaiting_promotion")
    _promote(app, cited)
    body = HTML.replace("</body>", f"<p>Agrees with #{cited}; unlike #{private}.</p></body>") \
        if "</body>" in HTML else HTML + f"<p>Agrees with #{cited}; unlike #{private}.</p>"
    number = _result(app, make_experiment, "Citing (HIGH confidence)", status="awaiting_promotion",
                     comment=f"Compare #{private} and #{cited}.")
    with app.app_context():
        results.save_clean_result(experiments.get_experiment(number), body, AGENT)
        results.attach_markup(experiments.get_experiment(number), "html_artifact",
                              f"<table><tr><td>as in #{private}</td></tr></table>", AGENT, title="Table")
        db.session.commit()
        assert f'href="/experiments/{cited}"' in experiments.get_experiment(number).body  # the owner's view
    _promote(app, number)

    _id, token = _link(app, scope="all_promoted", include_comments=True)
    page = app.test_client().get(f"/s/{token}/{number}")
    assert page.status_code == 200
    text = html_lib.unescape(page.text)  # the result sits in the frame's srcdoc
    assert f'href="/s/{token}/{cited}"' in text and f"unlike #{private}." in text
    assert "/experiments/" not in text and f"as in #{private}</td>" in text  # the figure too
    assert f"Compare #{private} and <a href=\"/s/{token}/{cited}\"" in text

    _id, single = _link(app, scope="experiment", number=number, include_comments=True)
    alone = html_lib.unescape(app.test_client().get(f"/s/{single}").text)
    assert "/experiments/" not in alone and f"/s/{single}/{cited}" not in alone
    assert f"Agrees with #{cited};" in alone
