"""Request size caps (SPEC §10): bodies over 2 MB are refused with 413."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, db

OVER = 2 * 1024 * 1024 + 1


def test_max_content_length_is_two_megabytes(app):
    """Is the request body cap 2 MB?"""
    assert app.config["MAX_CONTENT_LENGTH"] == 2 * 1024 * 1024


def test_oversized_form_post_is_413_and_creates_nothing(app, client, owner):
    """Is a 2 MB+ new-experiment form refused with 413 "too large" and nothing created?"""
    response = client.post("/experiments/new", data={"title": "Huge", "hypothesis": "h" * OVER,
                                                     "csrf_token": owner.csrf()})
    assert response.status_code == 413
    assert "too large" in response.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Experiment.id))) == 0


def test_oversized_login_post_is_413(client):
    """Is an oversized body refused with 413 even on a public form?"""
    response = client.post("/login", data={"email": "a@b.c", "password": "p" * OVER})
    assert response.status_code == 413


def test_oversized_api_body_is_413_json(api_client):
    """Does the JSON API answer an oversized body with 413 and a JSON error?"""
    scripted = api_client("read,write")
    response = scripted.post("/api/experiments", data=b"{" + b" " * OVER + b"}",
                             content_type="application/json")
    assert response.status_code == 413
    assert response.get_json()["error"] == "too_large"


def test_body_just_under_the_cap_is_read(app, client, owner):
    """Is a body under 2 MB read normally (the form answers with its own validation)?"""
    response = client.post("/experiments/new", data={"title": "", "hypothesis": "h" * 1000,
                                                     "csrf_token": owner.csrf()}, follow_redirects=True)
    assert response.status_code == 200
    assert "Title is required." in response.text
