"""A hostile document is answered in under a second, on every way in:
a token's PATCH /api/clean-results, a pod's .svg/.html upload, a comment's markdown.
Large but harmless markup from a pod is sanitized by a job, off the upload request."""
from __future__ import annotations

import time

import sqlalchemy as sa

from models import Artifact, CleanResultVersion, Figure, db
from tests.integration.test_progress_ingest import pod, upload  # noqa: F401

NESTED_200KB = "<div>" * 30_000 + "x" * 50_000
SVG_NESTED = ('<svg xmlns="http://www.w3.org/2000/svg">' + "<g>" * 40_000 + "</svg>").encode()


def _timed(call):
    """The CPU time the app spent answering (the test client runs it in this process), so a
    busy machine does not fail the check; the app's work is what the limit bounds."""
    started = time.process_time()
    response = call()
    return response, time.process_time() - started


def test_a_token_patching_a_nested_clean_result_gets_400_in_under_a_second(app, api_client, make_experiment):
    """Is a 200 KB, 30k-deep clean result refused with a JSON 400 in under a second, nothing stored?"""
    number = make_experiment("Hostile result", status="clean_result_drafting")
    writer = api_client("read,write")
    response, seconds = _timed(lambda: writer.patch(f"/api/clean-results/{number}", json={"html": NESTED_200KB}))
    assert seconds < 1.0
    assert response.status_code == 400
    assert response.get_json()["error"] == "markup_too_deep"
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(CleanResultVersion.id))) == 0


def test_a_pod_uploading_a_nested_svg_gets_400_in_under_a_second(app, client, pod):  # noqa: F811
    """Is a deeply nested SVG artifact refused with 400 (the bootstrap does not retry a 4xx)
    in under a second, with no artifact or figure kept?"""
    _, secret, _ = pod
    response, seconds = _timed(lambda: upload(client, secret, "figures/evil.svg", SVG_NESTED, "image/svg+xml"))
    assert seconds < 1.0
    assert response.status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Artifact.id))) == 0
        assert db.session.scalar(sa.select(sa.func.count(Figure.id))) == 0


def test_a_large_harmless_svg_is_sanitized_by_a_job(app, client, pod, worker):  # noqa: F811
    """Is a 200 KB flat SVG stored at once with its figure empty, and sanitized (scripts gone)
    when the job runs, rather than inside the pod's request?"""
    _, secret, _ = pod
    dots = "".join(f'<circle cx="{i % 500}" cy="{i // 500}" r="1"/>' for i in range(6_000))
    svg = f'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script>{dots}</svg>'.encode()
    assert len(svg) > 150_000
    response = upload(client, secret, "figures/dots.svg", svg, "image/svg+xml")
    assert response.status_code == 201
    with app.app_context():
        assert db.session.scalar(sa.select(Figure.content)) is None
    worker()
    with app.app_context():
        content = db.session.scalar(sa.select(Figure.content))
        assert content.count("<circle") == 6_000 and "alert" not in content


def test_a_comment_nesting_lists_deeply_is_refused_not_a_500(app, client, owner, make_experiment):
    """Does a comment nesting lists past the limit (Python-Markdown recurses per level and
    overflowed its stack) answer a clear refusal quickly, never a 500, and store nothing?"""
    number = make_experiment("Deep comment")
    page = client.get(f"/experiments/{number}")
    from tests.conftest import csrf_from
    response, seconds = _timed(lambda: client.post(f"/experiments/{number}/comments",
                                                   data={"body": "- " * 2_000 + "x",
                                                         "csrf_token": csrf_from(page.text)}))
    assert seconds < 1.0
    assert response.status_code < 500
    assert "levels deep" in response.get_data(as_text=True)
    from models import Comment
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Comment.id))) == 0
