"""Clean results on the experiment page, through the API and the CLI: sanitized on write,
versioned, linted (epm:clean-result-lint), previewed, figures, promotion (SPEC §8.1–8.4)."""
from __future__ import annotations

import re
from io import BytesIO
from pathlib import Path

import sqlalchemy as sa

from models import CleanResultVersion, Experiment, Figure, WorkflowEvent, db
from services.core.actors import Actor
from services.results import results
from services.workflow import experiments, lifecycle
from tests.conftest import csrf_from

HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _experiment(app, number) -> Experiment:
    db.session.expire_all()
    return experiments.get_experiment(number)


def _markers(app, number, marker):
    with app.app_context():
        experiment = _experiment(app, number)
        return list(db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker == marker)
            .order_by(WorkflowEvent.created_at)))


ANALYZER = Actor("agent", None, "analyzer")


def _save(app, number, html=HTML, title=TITLE, actor=ANALYZER):
    with app.app_context():
        saved = results.save_clean_result(_experiment(app, number), html, actor, title=title)
        db.session.commit()
        return saved


# --- the page ---------------------------------------------------------------------------

def test_owner_saves_a_result_from_the_editor(app, client, owner, make_experiment):
    """Does the editor's save store the sanitized body as version 1, post the lint marker and
    show the result in a sandboxed srcdoc frame whose styles the page's CSP allows by hash?"""
    number = make_experiment("Draft title", status="clean_result_drafting")
    page = client.get(f"/experiments/{number}")
    assert 'id="clean-result"' in page.text and "Write the clean result" in page.text
    response = client.post(f"/experiments/{number}/clean-result", data={
        "csrf_token": csrf_from(page.text), "html": HTML + "<script>alert(1)</script>", "title": TITLE})
    assert response.status_code == 303 and response.headers["Location"].endswith("#clean-result")
    with app.app_context():
        experiment = _experiment(app, number)
        assert experiment.title == TITLE and experiment.has_clean_result
        assert "<script" not in experiment.body and '<figure id="figure">' in experiment.body
        assert db.session.scalar(sa.select(sa.func.count(CleanResultVersion.id))) == 1
    lint_markers = _markers(app, number, "epm:clean-result-lint")
    assert len(lint_markers) == 1 and lint_markers[0].metadata_["passed"] is True
    page = client.get(f"/experiments/{number}")
    assert 'sandbox="allow-same-origin allow-popups allow-popups-to-escape-sandbox"' in page.text
    assert "allow-scripts" not in page.text and "srcdoc=" in page.text
    assert "MODERATE confidence</span>" in page.text and "Lint passed (9 checks)" in page.text
    csp = page.headers["Content-Security-Policy"]
    assert re.search(r"style-src 'self' 'sha256-[^']+';", csp)  # exactly the result's one <style>
    assert "unsafe-inline" not in csp


def test_an_empty_or_oversized_result_is_refused_with_nothing_changed(app, client, owner, make_experiment):
    """Are an empty body, one with nothing left after sanitizing, and one over 200 KB refused with a message?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    token = csrf_from(client.get(f"/experiments/{number}").text)
    for html, message in (("   ", "The clean result is empty."),
                          ("<script>alert(1)</script>", "Nothing is left of the clean result"),
                          ("<p>" + "x" * 200_001 + "</p>", "the limit is 200,000")):
        page = client.post(f"/experiments/{number}/clean-result", follow_redirects=True,
                           data={"csrf_token": token, "html": html, "title": "Draft"})
        assert page.status_code == 200 and message in page.text, message
    with app.app_context():
        assert not _experiment(app, number).has_clean_result
        assert db.session.scalar(sa.select(sa.func.count(CleanResultVersion.id))) == 0


def test_every_save_keeps_a_version_and_old_ones_can_be_restored(app, client, owner, make_experiment):
    """Do saves make v1, v2; does an identical save make none; can v1 be read and restored as v3?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    assert _save(app, number).version == 1
    second = _save(app, number, html=HTML.replace("0.6%", "0.7%"))
    assert (second.version, second.changed) == (2, True)
    assert _save(app, number, html=HTML.replace("0.6%", "0.7%")).changed is False
    page = client.get(f"/experiments/{number}/clean-result/versions/1")
    assert page.status_code == 200 and "Version 1 of 2" in page.text and "srcdoc=" in page.text
    assert 'data-confirm="Save version 1 again as the newest version?"' in page.text  # asks first
    client.post(f"/experiments/{number}/clean-result/versions/1/restore", data={"csrf_token": csrf_from(page.text)})
    with app.app_context():
        assert results.version_count(_experiment(app, number)) == 3
        assert "0.6%" in _experiment(app, number).body
    assert client.get(f"/experiments/{number}/clean-result/versions/9").status_code == 404


def test_live_preview_is_a_fragment_with_lint_and_a_draft_frame(app, htmx_client, make_experiment):
    """Does the preview return lint and a frame whose document is served with its own CSP and sandbox?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    fragment = htmx_client.post(f"/experiments/{number}/clean-result/preview",
                                data={"html": HTML + '<img src=x onerror=alert(1)>', "title": "No suffix"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert "Lint: 1 problem" in fragment.text and 'data-rule="title-confidence"' in fragment.text
    url = re.search(r'src="(/experiments/\d+/clean-result/drafts/[^"]+)"', fragment.text).group(1)
    frame = htmx_client.get(url, headers={"HX-Request": "false"})
    assert frame.status_code == 200 and "onerror" not in frame.text and "Curriculum, seed 3" in frame.text
    assert "sandbox allow-same-origin" in frame.headers["Content-Security-Policy"]
    assert "script-src" not in frame.headers["Content-Security-Policy"]  # default-src 'none' covers it
    assert frame.headers["X-Frame-Options"] == "SAMEORIGIN" and frame.headers["Cache-Control"] == "no-store"
    with app.app_context():
        assert not _experiment(app, number).has_clean_result  # a preview saves nothing
    assert htmx_client.get(f"/experiments/{number}/clean-result/drafts/unknown-key-123",
                           headers={"HX-Request": "false"}).status_code == 404
    bad = htmx_client.post(f"/experiments/{number}/clean-result/preview", data={"html": ""},
                           headers={"X-CSRFToken": htmx_client.csrf})
    assert "The clean result is empty." in bad.text


def test_preview_page_without_htmx(app, client, owner, make_experiment):
    """Is the preview also reachable as a full page (no JavaScript)?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    token = csrf_from(client.get(f"/experiments/{number}").text)
    page = client.post(f"/experiments/{number}/clean-result/preview", data={"csrf_token": token, "html": HTML},
                       follow_redirects=True)
    assert page.status_code == 200 and "<html" in page.text and "Preview (not saved yet)" in page.text


# --- figures -------------------------------------------------------------------------------

def test_figures_upload_png_and_svg_and_remove(app, client, owner, make_experiment):
    """Are a PNG (shown inline) and an SVG (sanitized, in a frame) attached, and one removed?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    _save(app, number)
    token = csrf_from(client.get(f"/experiments/{number}").text)
    client.post(f"/experiments/{number}/figures", data={"csrf_token": token, "title": "Loss curve",
                                                        "file": (BytesIO(PNG), "loss.png")},
                content_type="multipart/form-data")
    svg = b'<svg viewBox="0 0 10 10" onload="alert(1)"><script>alert(1)</script><circle r="3"/></svg>'
    client.post(f"/experiments/{number}/figures", data={"csrf_token": token, "file": (BytesIO(svg), "dots.svg")},
                content_type="multipart/form-data")
    page = client.get(f"/experiments/{number}")
    assert 'alt="Loss curve"' in page.text and 'src="data:image/png;base64,' in page.text
    with app.app_context():
        figures = list(db.session.scalars(sa.select(Figure).order_by(Figure.created_at)))
        assert [f.kind for f in figures] == ["image", "svg"]
        assert "onload" not in figures[1].content and "<script" not in figures[1].content
        first = figures[0].id
    client.post(f"/experiments/{number}/figures/{first}/delete", data={"csrf_token": token})
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Figure.id))) == 1


def test_a_figure_that_is_not_an_image_is_refused(app, client, owner, make_experiment):
    """Is a text file refused with a message, and nothing attached?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    token = csrf_from(client.get(f"/experiments/{number}").text)
    page = client.post(f"/experiments/{number}/figures", follow_redirects=True, data={"csrf_token": token,
                                                               "file": (BytesIO(b"hello"), "notes.txt")},
                       content_type="multipart/form-data")
    assert "Only PNG, JPEG and SVG files" in page.text
    page = client.post(f"/experiments/{number}/figures", data={"csrf_token": token}, follow_redirects=True)
    assert "Choose a file to upload or an artifact." in page.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Figure.id))) == 0


# --- promotion -------------------------------------------------------------------------------

def test_owner_promotes_to_shared_with_markers(app, client, owner, make_experiment):
    """Does promoting move awaiting_promotion → shared and post epm:promoted?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    _save(app, number)
    page = client.get(f"/experiments/{number}")
    assert "Promote this result" in page.text
    response = client.post(f"/experiments/{number}/promote", data={
        "csrf_token": csrf_from(page.text), "to": "shared", "expected": "awaiting_promotion"})
    assert response.status_code == 303
    with app.app_context():
        assert _experiment(app, number).status == "shared"
    promoted = _markers(app, number, "epm:promoted")
    assert len(promoted) == 1 and promoted[0].metadata_["to"] == "shared"


def test_promotion_asks_for_confirmation_when_lint_fails(app, client, owner, make_experiment):
    """Is a failing result refused without the confirm box (nothing changed), and promoted with it?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    _save(app, number, html="<p>Only a paragraph.</p>", title="No suffix")
    page = client.get(f"/experiments/{number}")
    assert "Promote although lint found" in page.text
    token = csrf_from(page.text)
    refused = client.post(f"/experiments/{number}/promote", data={"csrf_token": token, "to": "completed"},
                          follow_redirects=True)
    assert refused.status_code == 200 and "Confirm to promote anyway." in refused.text
    with app.app_context():
        assert _experiment(app, number).status == "awaiting_promotion"
    assert _markers(app, number, "epm:promoted") == []
    client.post(f"/experiments/{number}/promote", data={"csrf_token": token, "to": "completed", "confirm_lint": "1"})
    with app.app_context():
        assert _experiment(app, number).status == "completed"
    assert _markers(app, number, "epm:promoted")[0].metadata_["lint_confirmed"] is True


def test_promotion_refusals(app, client, owner, make_experiment):
    """Are a bad target, a wrong status and a missing result each refused with a message?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    token = csrf_from(client.get(f"/experiments/{number}").text)
    assert "has no clean result to promote" in client.post(
        f"/experiments/{number}/promote", data={"csrf_token": token, "to": "shared"}, follow_redirects=True).text
    _save(app, number)
    assert "Promote to shared" in client.post(
        f"/experiments/{number}/promote", data={"csrf_token": token, "to": "archived"}, follow_redirects=True).text
    running = make_experiment("Busy", status="running")
    assert "only a result awaiting promotion can be promoted" in client.post(
        f"/experiments/{running}/promote", data={"csrf_token": token, "to": "shared"}, follow_redirects=True).text
    with app.app_context():
        assert _experiment(app, number).status == "awaiting_promotion"


def test_entering_awaiting_promotion_posts_lint_and_awaiting_markers(app, make_experiment):
    """Does the analyzer's move to awaiting_promotion post epm:clean-result-lint and epm:awaiting-promotion?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    _save(app, number)
    with app.app_context():
        effects = lifecycle.transition(_experiment(app, number), "awaiting_promotion", Actor("agent", None, "a"))
        db.session.commit()
        lifecycle.run_side_effects(effects)
    assert len(_markers(app, number, "epm:awaiting-promotion")) == 1
    assert len(_markers(app, number, "epm:clean-result-lint")) == 2  # the save, then the move


def test_a_plain_status_move_to_shared_still_gets_the_promoted_marker(app, client, owner, make_experiment):
    """Does promoting through the generic status control still record epm:promoted?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    _save(app, number)
    page = client.get(f"/experiments/{number}")
    client.post(f"/experiments/{number}/status", data={"csrf_token": csrf_from(page.text), "to": "completed"})
    assert _markers(app, number, "epm:promoted")[0].metadata_["via"] == "status move"


# --- API ---------------------------------------------------------------------------------------

def test_api_patch_clean_result_sanitizes_and_versions(app, api_client, make_experiment):
    """Does PATCH /api/clean-results/<n> store a sanitized version and answer with the lint report?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    scripted = api_client("read,write")
    response = scripted.patch(f"/api/clean-results/{number}", json={"html": HTML + "<iframe src=x></iframe>",
                                                                     "title": TITLE})
    assert response.status_code == 200, response.text
    body = response.get_json()
    assert body["version"] == 1 and body["lint"]["passed"] is True
    title_only = scripted.patch(f"/api/clean-results/{number}", json={"title": "Shorter (LOW confidence)"})
    assert title_only.get_json()["version"] == 2
    with app.app_context():
        experiment = _experiment(app, number)
        assert "<iframe" not in experiment.body and experiment.title == "Shorter (LOW confidence)"


def test_api_patch_clean_result_errors(app, api_client, make_experiment):
    """Are bad JSON, unknown fields, a non-string body, nothing to set and a read-only token refused?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    scripted = api_client("read,write")
    assert scripted.patch(f"/api/clean-results/{number}", data="{", content_type="application/json").status_code == 400
    unknown = scripted.patch(f"/api/clean-results/{number}", json={"html": "<p>x</p>", "status": "shared"})
    assert unknown.status_code == 400 and "Unknown field" in unknown.get_json()["message"]
    assert scripted.patch(f"/api/clean-results/{number}", json={"html": 5}).status_code == 400
    assert scripted.patch(f"/api/clean-results/{number}", json={}).status_code == 400
    assert scripted.patch("/api/clean-results/99999", json={"html": "<p>x</p>"}).status_code == 404
    assert api_client("read").patch(f"/api/clean-results/{number}", json={"html": "<p>x</p>"}).status_code == 403
    with app.app_context():
        assert not _experiment(app, number).has_clean_result


def test_api_promote_needs_write_and_promote_scopes(app, api_client, make_experiment):
    """Can a write-only token not promote, a write+promote token promote, and lint failure answer 409?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    _save(app, number, html="<p>Only a paragraph.</p>", title="No suffix")
    write_only = api_client("read,write")
    refused = write_only.post(f"/api/experiments/{number}/promote", json={"to": "shared"})
    assert refused.status_code == 403 and refused.get_json()["error"] == "missing_scope"
    promoter = api_client("write,promote")
    lint_failed = promoter.post(f"/api/experiments/{number}/promote", json={"to": "shared"})
    assert lint_failed.status_code == 409 and lint_failed.get_json()["error"] == "lint_failed"
    assert any(not f["ok"] for f in lint_failed.get_json()["findings"])
    assert promoter.post(f"/api/experiments/{number}/promote", json={"to": "nowhere"}).status_code == 400
    assert promoter.post(f"/api/experiments/{number}/promote",
                         json={"to": "shared", "confirm_lint": "yes"}).status_code == 400
    done = promoter.post(f"/api/experiments/{number}/promote", json={"to": "shared", "confirm_lint": True})
    assert done.status_code == 200 and done.get_json()["experiment"]["status"] == "shared"
    # Promoting again (an edit after promotion) meets the same lint check, and keeps the status.
    again = promoter.post(f"/api/experiments/{number}/promote", json={"to": "shared"})
    assert again.status_code == 409 and again.get_json()["error"] == "lint_failed"
    elsewhere = promoter.post(f"/api/experiments/{number}/promote", json={"to": "completed", "confirm_lint": True})
    assert elsewhere.status_code == 409 and elsewhere.get_json()["error"] == "transition_not_allowed"


def test_a_promote_scope_opens_only_the_promotion_move(app, api_client, make_experiment):
    """Does a promote-scoped token still act as an agent for every other move (no owner powers)?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    promoter = api_client("read,write,promote")
    response = promoter.patch(f"/api/experiments/{number}", json={"status": "shared"})
    assert response.status_code == 409  # a plain status move is the owner's, whatever the scopes
    response = promoter.patch(f"/api/experiments/{number}", json={"status": "planning", "note": "redo"})
    assert response.status_code == 409
