"""CSRF on every state change made with a session (SPEC §10, STYLE §10): without the
token a clear "reload" page and nothing changed; forms send a field, htmx a header."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import ApiToken, Experiment, db
from services.workflow import experiments

RELOAD = "Reload the page and try again."


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def _status(app, number: int) -> str:
    with app.app_context():
        return experiments.get_experiment(number).status


@pytest.mark.parametrize("token", [None, "", "forged-token-value"])
def test_new_experiment_without_valid_token_changes_nothing(app, client, owner, token):
    """Is the new-experiment form refused with 400 and the reload message when the token is missing or forged?"""
    data = {"title": "Sneaky experiment", "kind": "experiment"}
    if token is not None:
        data["csrf_token"] = token
    response = client.post("/experiments/new", data=data)
    assert response.status_code == 400
    assert RELOAD in response.text
    assert _count(app, Experiment) == 0


def test_new_experiment_with_token_is_created(app, client, owner):
    """With the form's token, is the experiment created?"""
    response = client.post("/experiments/new", data={"title": "Honest experiment",
                                                     "csrf_token": owner.csrf()})
    assert response.status_code == 303
    assert _count(app, Experiment) == 1


def test_board_move_without_token_changes_nothing(app, client, owner, make_experiment):
    """Is a board move without a token refused (400) and the status unchanged?"""
    number = make_experiment()
    response = client.post(f"/board/move/{number}", data={"to": "clarifying", "expected": "proposed"})
    assert response.status_code == 400
    assert RELOAD in response.text
    assert _status(app, number) == "proposed"


def test_board_move_with_form_token_works(app, client, owner, make_experiment):
    """With the form field token, does the same move go through?"""
    number = make_experiment()
    response = client.post(f"/board/move/{number}", data={"to": "clarifying", "expected": "proposed",
                                                          "csrf_token": owner.csrf()})
    assert response.status_code == 303  # moved, then back to the board (post/redirect/get)
    assert _status(app, number) == "clarifying"


def test_htmx_move_uses_the_x_csrftoken_header(app, htmx_client, make_experiment):
    """Does an htmx POST pass with the X-CSRFToken header and fail (400) without it?"""
    number = make_experiment()
    refused = htmx_client.post(f"/board/move/{number}", data={"to": "clarifying", "expected": "proposed"})
    assert refused.status_code == 400
    assert _status(app, number) == "proposed"
    accepted = htmx_client.post(f"/board/move/{number}", data={"to": "clarifying", "expected": "proposed"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert accepted.status_code == 200
    assert _status(app, number) == "clarifying"


def test_every_page_puts_the_token_in_hx_headers(client, owner):
    """Does the page body carry the CSRF token in hx-headers for htmx requests?"""
    page = client.get("/")
    assert "hx-headers='{\"X-CSRFToken\": \"" in page.text


def test_token_create_without_csrf_creates_nothing(app, client, owner):
    """Is creating an API token without a CSRF token refused with nothing stored?"""
    response = client.post("/api-tokens", data={"name": "laptop", "scopes": ["read"]})
    assert response.status_code == 400
    assert RELOAD in response.text
    assert _count(app, ApiToken) == 0


def test_token_revoke_without_csrf_keeps_the_token(app, client, owner, api_client):
    """Is a revoke without a CSRF token refused and the token still active?"""
    scripted = api_client("read")
    response = client.post(f"/api-tokens/{scripted.token_id}/revoke")
    assert response.status_code == 400
    assert scripted.get("/api/statuses").status_code == 200


def test_status_change_from_experiment_page_without_csrf(app, client, owner, make_experiment):
    """Is the experiment page's status form refused without a token?"""
    number = make_experiment()
    response = client.post(f"/experiments/{number}/status", data={"to": "clarifying"})
    assert response.status_code == 400
    assert _status(app, number) == "proposed"


def test_edit_without_csrf_changes_nothing(app, client, owner, make_experiment):
    """Is an edit without a token refused and the title unchanged?"""
    number = make_experiment("Original title")
    response = client.post(f"/experiments/{number}/edit", data={"title": "Hijacked"})
    assert response.status_code == 400
    with app.app_context():
        assert experiments.get_experiment(number).title == "Original title"


def test_csrf_token_survives_a_working_day(app, client, owner, make_experiment):
    """Is a token from a page left open 8 hours still accepted, and one 13 hours old refused?"""
    import time
    from unittest import mock

    number = make_experiment()
    token = owner.csrf()
    move = {"to": "clarifying", "expected": "proposed", "csrf_token": token}
    with mock.patch("itsdangerous.timed.TimestampSigner.get_timestamp",
                    return_value=int(time.time()) + 13 * 3600):
        assert client.post(f"/board/move/{number}", data=move).status_code == 400
    assert _status(app, number) == "proposed"
    with mock.patch("itsdangerous.timed.TimestampSigner.get_timestamp",
                    return_value=int(time.time()) + 8 * 3600):
        response = client.post(f"/board/move/{number}", data=move)
    assert response.status_code == 303  # accepted: moved, then back to the board
    assert _status(app, number) == "clarifying"
