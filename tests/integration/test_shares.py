"""Mentor share links (SPEC §8.5): created by the owner, shown once, hashed; read-only,
stateless, noindex, no-referrer, rate limited, counted; revoked or expired → 404."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from models import ShareLink, WorkflowEvent, db
from services.core import clock
from services.core.actors import Actor
from services.core.token_hash import digest as token_digest
from services.planning import discussion
from services.results import results, shares
from services.workflow import experiments, lifecycle
from tests.conftest import csrf_from

HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
AGENT = Actor("agent", None, "analyzer")
OWNER = Actor("owner", None, "Owner")


def _result(app, make_experiment, title, status="shared", comment=None):
    """An experiment at `status` with a clean result; a shared or completed one got there by
    promotion, the only way a result reaches share links."""
    promoted = status in ("shared", "completed")
    number = make_experiment(title, status="awaiting_promotion" if promoted else status)
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, HTML, AGENT, title=title)
        if comment:
            discussion.post_comment("experiment", experiment, comment, Actor("owner", None, "Owner"))
        if promoted:
            results.promote(experiment, status, OWNER, confirm_lint=True)
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
                          ({"scope": "project"}, "Choose the project to share."),
                          ({"scope": "everything"}, "Share one experiment, a project or all promoted results.")):
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


# --- a link shows what was promoted, as it was promoted -----------------------------------------

EDITED = HTML.replace("0.6%", "0.9%")


def _mentor_text(app, url: str) -> str:
    """A share page as the mentor reads it (the result sits escaped in its frame's srcdoc)."""
    import html as html_lib
    response = app.test_client().get(url)
    assert response.status_code == 200, response.status_code
    return html_lib.unescape(response.text)


def test_a_link_to_an_unpromoted_experiment_shows_nothing_shared_yet(app, api_client, make_experiment):
    """A one-experiment link to an experiment in `proposed` whose result a write token wrote
    (and whose pods posted metrics) showed that result and its charts; now the link says
    nothing is shared yet — no title, no result, no charts, no figure — and its chart data
    and result addresses are 404."""
    number = make_experiment("Secret plan (HIGH confidence)")
    writer = api_client("read,write")
    assert writer.patch(f"/api/clean-results/{number}", json={"html": HTML, "title": "Leaked (HIGH confidence)"}
                        ).status_code == 200
    with app.app_context():
        from tests.integration.test_metric_charts import _pod, _store
        experiment = experiments.get_experiment(number)
        _store(_pod(experiment.id, 0), "loss", range(10), lambda s: 1.0 / (s + 1))
        db.session.commit()
    _id, token = _link(app, scope="experiment", number=number)
    mentor = app.test_client()
    page = mentor.get(f"/s/{token}")
    assert page.status_code == 200 and "Nothing shared yet" in page.text
    for secret in ("Leaked", "Secret plan", "Final validation loss", "data-metric-chart", "srcdoc"):
        assert secret not in page.text
    assert mentor.get(f"/s/{token}/metrics?name=loss").status_code == 404
    assert mentor.get(f"/s/{token}/{number}").status_code == 404
    assert mentor.get(f"/s/{token}/{number}/metrics?name=loss").status_code == 404


def test_a_result_promoted_to_completed_is_not_shared(app, make_experiment):
    """`completed` means kept as done, not shared (SPEC §8.4): a one-experiment link to it
    shows nothing, like an "all promoted" link."""
    number = _result(app, make_experiment, "Kept (HIGH confidence)", status="completed")
    _id, token = _link(app, scope="experiment", number=number)
    page = app.test_client().get(f"/s/{token}")
    assert page.status_code == 200 and "Nothing shared yet" in page.text and "Kept" not in page.text


def test_a_write_tokens_edit_after_promotion_reaches_mentors_only_when_promoted_again(
        app, client, owner, api_client, make_experiment):
    """PATCH /api/clean-results by a token without `promote` after promotion changes the
    owner's draft (the page says it was edited since promotion), not what mentors read —
    the result page, the list's title and excerpt; the token cannot promote it; the owner's
    "Promote again" shares the edit."""
    number = _result(app, make_experiment, "Gap is 0.6% (HIGH confidence)")
    _id, single = _link(app, scope="experiment", number=number)
    _id, listing = _link(app, scope="all_promoted")
    writer = api_client("read,write")
    edit = writer.patch(f"/api/clean-results/{number}", json={"html": EDITED, "title": "Gap is 0.9% (HIGH confidence)"})
    assert edit.status_code == 200 and edit.get_json()["changed"] is True
    assert writer.post(f"/api/experiments/{number}/promote", json={"to": "shared"}).status_code == 403

    for url in (f"/s/{single}", f"/s/{listing}/{number}", f"/s/{listing}"):
        text = _mentor_text(app, url)
        assert "Gap is 0.6%" in text and "0.9%" not in text, url
    owner_page = client.get(f"/experiments/{number}")
    assert "Edited since promotion" in owner_page.text and "Promote again" in owner_page.text

    tag = re.search(r'name="result_tag" value="([0-9a-f]+)"', owner_page.text).group(1)
    again = client.post(f"/experiments/{number}/promote", data={
        "csrf_token": csrf_from(owner_page.text), "to": "shared", "expected": "shared", "result_tag": tag})
    assert again.status_code == 303
    for url in (f"/s/{single}", f"/s/{listing}/{number}"):
        text = _mentor_text(app, url)
        assert "Gap is 0.9%" in text and "differs by 0.9%" in text and "0.6%" not in text
    assert "Edited since promotion" not in client.get(f"/experiments/{number}").text
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "shared"
        markers = [e.metadata_ for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker == "epm:promoted")
            .order_by(WorkflowEvent.created_at))]
        assert [m["again"] for m in markers] == [False, True]


def test_promoting_again_refuses_a_result_saved_since_the_page_was_read(app, client, owner, api_client,
                                                                         make_experiment):
    """The owner reads the edit, a token saves another meanwhile, the owner presses Promote
    again: refused with a message, and mentors still read the first promoted version."""
    number = _result(app, make_experiment, "Gap is 0.6% (HIGH confidence)")
    writer = api_client("read,write")
    writer.patch(f"/api/clean-results/{number}", json={"html": EDITED})
    owner_page = client.get(f"/experiments/{number}")
    tag = re.search(r'name="result_tag" value="([0-9a-f]+)"', owner_page.text).group(1)
    writer.patch(f"/api/clean-results/{number}", json={"html": HTML.replace("0.6%", "12%")})
    refused = client.post(f"/experiments/{number}/promote", data={
        "csrf_token": csrf_from(owner_page.text), "to": "shared", "expected": "shared", "result_tag": tag},
        follow_redirects=True)
    assert refused.status_code == 200 and "changed since you opened the page" in refused.text
    _id, token = _link(app, scope="experiment", number=number)
    text = _mentor_text(app, f"/s/{token}")
    assert "differs by 0.6%" in text and "12%" not in text and "0.9%" not in text


def test_promoting_again_through_the_api_keeps_the_status(app, api_client, make_experiment):
    """A write+promote token promotes an edit again as `shared`; to `completed` it is a 409
    (that is a different move), and nothing changes."""
    number = _result(app, make_experiment, "Gap is 0.6% (HIGH confidence)")
    promoter = api_client("read,write,promote")
    promoter.patch(f"/api/clean-results/{number}", json={"html": EDITED})
    wrong = promoter.post(f"/api/experiments/{number}/promote", json={"to": "completed"})
    assert wrong.status_code == 409 and wrong.get_json()["error"] == "transition_not_allowed"
    done = promoter.post(f"/api/experiments/{number}/promote", json={"to": "shared", "confirm_lint": True})
    assert done.status_code == 200 and done.get_json()["experiment"]["status"] == "shared"
    _id, token = _link(app, scope="experiment", number=number)
    assert "differs by 0.9%" in _mentor_text(app, f"/s/{token}")


def test_figures_attached_after_promotion_wait_for_the_next_promotion(app, make_experiment):
    """A figure attached after promotion is the owner's draft too; one removed goes at once."""
    number = _result(app, make_experiment, "Figures (HIGH confidence)", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        kept = results.attach_markup(experiment, "svg", '<svg viewBox="0 0 4 4"><title>kept figure</title></svg>',
                                     OWNER, title="Kept figure").id
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        results.attach_markup(experiment, "svg", '<svg viewBox="0 0 4 4"><title>late figure</title></svg>',
                              OWNER, title="Late figure")
        db.session.commit()
    _id, token = _link(app, scope="experiment", number=number)
    text = _mentor_text(app, f"/s/{token}")
    assert "Kept figure" in text and "Late figure" not in text
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.remove_figure(experiment, kept, OWNER)
        db.session.commit()
    assert "Kept figure" not in _mentor_text(app, f"/s/{token}")


def test_a_reopened_experiment_keeps_showing_its_promoted_version(app, api_client, make_experiment):
    """Promoted, then reopened to `proposed` and rewritten by a token: mentors read the
    promoted version, not the rewrite."""
    number = _result(app, make_experiment, "Gap is 0.6% (HIGH confidence)")
    with app.app_context():
        lifecycle.transition(experiments.get_experiment(number), "proposed", OWNER, note="One more seed.")
        db.session.commit()
    api_client("read,write").patch(f"/api/clean-results/{number}", json={"html": EDITED, "title": "Rewritten"})
    _id, token = _link(app, scope="experiment", number=number)
    text = _mentor_text(app, f"/s/{token}")
    assert "Gap is 0.6%" in text and "differs by 0.6%" in text and "Rewritten" not in text


def test_a_status_move_promotes_like_the_button_and_an_override_shares_nothing(app, make_experiment):
    """awaiting_promotion → shared as a plain owner move freezes the result as the button
    does; an owner's override to shared is not a promotion and shares nothing."""
    moved = _result(app, make_experiment, "Moved (HIGH confidence)", status="awaiting_promotion")
    forced = _result(app, make_experiment, "Forced (HIGH confidence)", status="reviewing")
    with app.app_context():
        lifecycle.transition(experiments.get_experiment(moved), "shared", OWNER)
        lifecycle.transition(experiments.get_experiment(forced), "shared", OWNER, override=True, note="Skip review.")
        db.session.commit()
    _id, listing = _link(app, scope="all_promoted")
    index = _mentor_text(app, f"/s/{listing}")
    assert "Moved" in index and "Forced" not in index
    assert app.test_client().get(f"/s/{listing}/{forced}").status_code == 404


def test_a_project_link_without_its_project_shows_nothing(app, make_experiment):
    """Does a `project` link that names no project answer 404 and reach no result at all?
    (Project links themselves: tests/integration/test_projects.py.)"""
    number = _result(app, make_experiment, "Project-worthy (HIGH confidence)")
    token = "p" * 43
    with app.app_context():
        db.session.add(ShareLink(id=uuid.uuid4(), token_hash=token_digest(token), scope="project", label="Project",
                                 use_count=0))
        db.session.commit()
    page = app.test_client().get(f"/s/{token}")
    assert page.status_code == 404 and "Project-worthy" not in page.text
    assert app.test_client().get(f"/s/{token}/{number}").status_code == 404
