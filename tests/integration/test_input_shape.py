"""Size and shape limits: metadata capped at 64 KB; NUL characters, lone
surrogates and deeply nested JSON answer 400, never 500, and change nothing; artifact names
download intact (RFC 6266); titles, token names and comments with no visible character are refused."""
from __future__ import annotations

from urllib.parse import quote, unquote

import pytest
import sqlalchemy as sa

from models import ApiToken, Artifact, Comment, Experiment, ShareLink, WorkflowEvent, db
from tests.conftest import csrf_from
from tests.integration.test_progress_ingest import pod, upload  # noqa: F401


def _event_count(app):
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)))


def _experiment_count(app):
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count(Experiment.id)))


def test_marker_metadata_over_64kb_is_refused(app, api_client, make_experiment):
    """Is a marker whose metadata is over 64 KB refused (413, JSON error), nothing recorded,
    while 60 KB is accepted?"""
    number = make_experiment("Big metadata")
    writer = api_client("read,write")
    before = _event_count(app)
    response = writer.post(f"/api/experiments/{number}/workflow-events",
                           json={"marker": "epm:progress", "metadata": {"blob": "x" * (65 * 1024)}})
    assert response.status_code == 413
    assert response.get_json()["field"] == "metadata"
    assert _event_count(app) == before
    accepted = writer.post(f"/api/experiments/{number}/workflow-events",
                           json={"marker": "epm:progress", "metadata": {"blob": "x" * (60 * 1024)}})
    assert accepted.status_code == 201, accepted.get_json()


@pytest.mark.parametrize("raw", [
    b'{"title": "nul \\u0000 inside"}',
    b'{"title": "lone \\ud800 surrogate"}',
    b'{"title": "ok", "tags": ["\\udfff"]}',
    b'{"title": "deep", "hypothesis": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"title": "deeper", "x": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}",
    b'{"title": "\xed\xa0\x80 raw surrogate bytes"}',
])
def test_hostile_json_answers_400_and_creates_nothing(app, api_client, raw):
    """Does POST /api/experiments answer each hostile body (NUL, lone surrogates, JSON 5,000 and
    100,000 levels deep, surrogate bytes) with a JSON 400, never a 500, creating nothing?"""
    writer = api_client("read,write")
    response = writer.post("/api/experiments", data=raw, content_type="application/json")
    assert response.status_code == 400, response.get_data()[:300]
    assert response.get_json()["error"] in ("invalid_json", "invalid_text")
    assert _experiment_count(app) == 0


def test_hostile_progress_json_answers_400(app, client, pod):  # noqa: F811
    """Does a pod's progress post nested 100,000 deep or carrying NUL answer 400, not 500?"""
    _, secret, _ = pod
    for raw in (b"[" * 100_000, b'{"progressPct": 5, "message": "a\\u0000b"}'):
        response = client.post("/api/progress", data=raw, content_type="application/json",
                               headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 400


@pytest.mark.parametrize("field", ["title", "hypothesis"])
def test_a_nul_in_a_form_field_is_refused(app, client, owner, field):
    """Is a NUL character typed into the new-experiment form refused with 400, nothing created?"""
    page = client.get("/experiments/new")
    data = {"title": "Fine title", "hypothesis": "fine", "csrf_token": csrf_from(page.text)}
    data[field] = "bad\x00value"
    response = client.post("/experiments/new", data=data)
    assert response.status_code == 400
    assert "NUL" in response.get_data(as_text=True)
    assert _experiment_count(app) == 0


def test_a_nul_in_a_query_argument_is_refused(client, owner):
    """Does a board filter with %00 answer 400 instead of reaching the database?"""
    assert client.get("/experiments?q=a%00b").status_code == 400


INVISIBLE_TITLES = [
    pytest.param("\u200b", id="zero-width-space"),
    pytest.param("\u200b\u200c\u200d\ufeff", id="zero-width-run"),
    pytest.param(" \u2060 \u00ad ", id="word-joiner-soft-hyphen"),
    pytest.param("\u2800", id="braille-blank-So"),
    pytest.param("\U000e0020", id="tag-space-Cf"),
    pytest.param("\U000e0041\U000e0042\U000e007f", id="tag-letters-Cf"),
    pytest.param("\u3164", id="hangul-filler-Lo"),
    pytest.param("\u115f\u1160", id="hangul-choseong-jungseong-fillers-Lo"),
    pytest.param("\uffa0", id="halfwidth-hangul-filler-Lo"),
    pytest.param("\U0001d159", id="musical-null-notehead-So"),
    pytest.param("\u3000\u2007\u00a0\u1680", id="other-spaces-Zs"),
    pytest.param("\u2028\u2029", id="line-paragraph-separators"),
    pytest.param("\u0301\u034f\ufe0f", id="marks-without-a-base"),
    pytest.param("\ue000\U000f0000", id="private-use-Co"),
    pytest.param("\u202e\u2066\u061c", id="bidi-controls"),
    pytest.param("\u2800 \u3164 \U000e0020 \u200b", id="mixed"),
]
VISIBLE_TITLES = ["日本語の実験", "Ελληνική υπόθεση", "Проверка гипотезы", "עברית", "العربية", "हिन्दी प्रयोग",
                  "한국어 실험", "🧪", "🏳️‍🌈", "7", "?", "€", "ㅤA", "⠁"]


@pytest.mark.parametrize("title", INVISIBLE_TITLES)
def test_titles_without_a_visible_character_are_refused(app, api_client, client, owner, title):
    """Is a title of only invisible or blank-rendering characters (zero-width, tag characters,
    Hangul fillers, the blank braille pattern…) refused, by the API and the form alike?"""
    writer = api_client("read,write")
    response = writer.post("/api/experiments", json={"title": title})
    assert response.status_code == 400 and response.get_json()["field"] == "title"
    assert response.get_json()["message"].startswith("Title is required")
    page = client.get("/experiments/new")
    form = client.post("/experiments/new", data={"title": title, "csrf_token": csrf_from(page.text)},
                       follow_redirects=True)  # a refused form redirects back to the page that says why
    assert "Title is required" in form.get_data(as_text=True)
    assert _experiment_count(app) == 0


@pytest.mark.parametrize("title", VISIBLE_TITLES)
def test_titles_in_any_script_emoji_or_one_digit_are_accepted(app, api_client, title):
    """Are real titles in other scripts, an emoji, a single digit, punctuation or a symbol accepted
    and stored as written?"""
    writer = api_client("read,write")
    response = writer.post("/api/experiments", json={"title": title})
    assert response.status_code == 201, response.get_json()
    with app.app_context():
        assert db.session.scalar(sa.select(Experiment.title)) == title


@pytest.mark.parametrize("name", ["\u2800", "\U000e0020", "\u3164 \u200b"])
def test_token_names_without_a_visible_character_are_refused(app, client, owner, name):
    """Is an API token named with only blank characters refused on the page, nothing created?"""
    response = client.post("/api-tokens", data={"name": name, "scopes": ["read"], "csrf_token": owner.csrf()},
                           follow_redirects=True)
    assert "Give the token a name" in response.get_data(as_text=True)
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(ApiToken.id))) == 0


def test_a_share_label_without_a_visible_character_gets_the_default_label(app, client, owner):
    """Does a share link labelled with only blank characters get the default label, as an empty one does,
    instead of a row that looks unlabelled in the list?"""
    page = client.get("/settings")
    client.post("/settings/share-links", data={"csrf_token": csrf_from(page.text), "scope": "all_promoted",
                                               "label": "\u2800\U000e0020\u3164"})
    with app.app_context():
        assert db.session.scalar(sa.select(ShareLink.label)) == "All promoted results"


@pytest.mark.parametrize("body", ["\u2800", "\U000e0020\U000e0020", "\u3164\n\u200b"])
def test_comments_without_a_visible_character_are_refused(app, htmx_client, make_experiment, body):
    """Is a comment of only blank characters refused like an empty one, nothing stored?"""
    number = make_experiment("Probe")
    response = htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                                data={"body": body})
    assert response.status_code == 200 and "the comment is empty" in response.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Comment.id))) == 0


@pytest.mark.parametrize("name", ["résumé €.json", 'say "hi".txt', "a;b=c.csv", "数据 图.json", "50% done.txt"])
def test_artifact_names_download_intact(app, client, owner, pod, name):  # noqa: F811
    """Does an artifact whose name has non-Latin-1 characters, quotes, `;` or `%` download with a
    valid RFC 6266 header whose filename* gives the exact name back?"""
    _, secret, _ = pod
    assert upload(client, secret, quote(name), b'{"a": 1}' if name.endswith(".json") else b"a,b\n",
                  "application/octet-stream").status_code == 201
    with app.app_context():
        artifact_id = db.session.scalar(sa.select(Artifact.id))
    response = client.get(f"/artifacts/{artifact_id}")
    assert response.status_code == 200
    header = response.headers["Content-Disposition"]
    header.encode("latin-1")  # a header must be Latin-1; the old one raised here for "数据"
    fallback = header.split('filename="', 1)[1].split('"', 1)[0]
    assert '"' not in fallback and ";" not in fallback
    assert unquote(header.split("filename*=UTF-8''", 1)[1]) == name
