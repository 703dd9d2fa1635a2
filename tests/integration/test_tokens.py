"""API tokens (SPEC §1, §9.2, §10): shown once, stored hashed, scoped, revocable."""
from __future__ import annotations

import html
import re

import sqlalchemy as sa

from models import ApiToken, db
from services.core import registry


def _token_rows(app) -> list[ApiToken]:
    with app.app_context():
        return list(db.session.scalars(sa.select(ApiToken)))


def _secret_in_database(app, secret: str) -> list[str]:
    """Every table whose rows, rendered as text, contain `secret`."""
    found = []
    with app.app_context():
        for table in db.metadata.sorted_tables:
            rows = db.session.execute(sa.text(f'SELECT t::text FROM "{table.name}" t')).scalars()
            if any(secret in row for row in rows):
                found.append(table.name)
    return found


def _create_on_page(client, owner, name="laptop CLI", scopes=("read",)):
    """Create on the page and follow its redirect (post/redirect/get): the page that shows the secret."""
    posted = client.post("/api-tokens", data={"name": name, "scopes": list(scopes), "csrf_token": owner.csrf()})
    assert posted.status_code == 303 and posted.headers["Location"].endswith("/api-tokens")
    return client.get(posted.headers["Location"])


def test_page_creates_a_token_and_shows_the_secret_once(app, client, owner):
    """Does creating a token show its sk_ secret once, keep only a hash, and list its prefix?"""
    response = _create_on_page(client, owner, scopes=("read", "write"))
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    secret = re.search(r'value="(sk_[^"]+)"', response.text).group(1)
    assert "only time" in response.text

    [token] = _token_rows(app)
    assert token.name == "laptop CLI" and token.scopes == ["read", "write"]
    assert token.prefix == secret[:10]
    assert token.secret_hash != secret
    assert _secret_in_database(app, secret) == []

    listing = client.get("/api-tokens")
    assert secret not in listing.text
    assert f"{token.prefix}…" in listing.text
    assert "read, write" in listing.text
    assert f'action="/api-tokens/{token.id}/revoke" data-confirm="Revoke laptop CLI? Scripts using it stop working' in listing.text


def test_page_refuses_a_token_without_name_or_scope(app, client, owner):
    """Are a blank name and no scopes refused with a message and nothing created?"""
    response = _create_on_page(client, owner, name="   ")
    assert "Give the token a name" in response.text
    response = client.post("/api-tokens", data={"name": "no scopes", "csrf_token": owner.csrf()},
                           follow_redirects=True)
    assert "Choose at least one scope." in response.text
    response = _create_on_page(client, owner, scopes=("read", "root"))
    assert "Unknown scope 'root'" in html.unescape(response.text)
    assert _token_rows(app) == []


def test_bearer_token_reads_statuses_and_experiments(app, api_client, make_experiment):
    """Does a read token get 200 on /api/statuses and /api/experiments with the data?"""
    number = make_experiment("Readable")
    scripted = api_client("read")
    statuses = scripted.get("/api/statuses")
    assert statuses.status_code == 200
    assert [s["name"] for s in statuses.get_json()["statuses"]] == registry.STATUS_NAMES
    listing = scripted.get("/api/experiments")
    assert listing.status_code == 200
    [experiment] = listing.get_json()["experiments"]
    assert experiment["number"] == number
    assert experiment["turn"] == "Sagan turn: clarify scope"


def test_token_without_the_scope_is_forbidden(app, api_client):
    """Does a token lacking `read` get 403 missing_scope?"""
    scripted = api_client("write")
    response = scripted.get("/api/statuses")
    assert response.status_code == 403
    assert response.get_json()["error"] == "missing_scope"


def test_revoked_token_is_refused(app, client, owner, api_client):
    """After revoking on the page, does the token get 401 invalid_token at once?"""
    scripted = api_client("read")
    assert scripted.get("/api/experiments").status_code == 200
    response = client.post(f"/api-tokens/{scripted.token_id}/revoke", data={"csrf_token": owner.csrf()})
    assert response.status_code == 303
    refused = scripted.get("/api/experiments")
    assert refused.status_code == 401
    assert refused.get_json()["error"] == "invalid_token"
    assert "revoked" in client.get("/api-tokens").text


def test_revoking_an_unknown_token_is_404(client, owner):
    """Does revoking a token id that does not exist answer 404, not 500?"""
    for token_id in ("00000000-0000-4000-8000-000000000001", "not-a-uuid"):
        response = client.post(f"/api-tokens/{token_id}/revoke", data={"csrf_token": owner.csrf()})
        assert response.status_code == 404


def test_garbage_tokens_are_refused(app, client):
    """Do made-up, wrongly prefixed and oversized bearer values get 401 invalid_token?"""
    for secret in ("sk_not-a-real-token", "hello", "sk_" + "x" * 500, ""):
        response = client.get("/api/statuses", headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 401, secret
        assert response.get_json()["error"] in ("invalid_token", "unauthorized")


def test_token_use_is_recorded(app, api_client):
    """Does a token's last use get recorded when it is used?"""
    scripted = api_client("read")
    assert _token_rows(app)[0].last_used_at is None
    scripted.get("/api/statuses")
    assert _token_rows(app)[0].last_used_at is not None


def test_cli_creates_a_working_token_printed_once(app, runner):
    """Does `tokens create --scopes read,write` print the secret once, and does it work?"""
    result = runner.invoke(args=["tokens", "create", "--name", "X", "--scopes", "read,write"])
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip().splitlines()[0]
    assert secret.startswith("sk_")
    assert result.output.count(secret) == 1
    [token] = _token_rows(app)
    assert token.name == "X" and token.scopes == ["read", "write"]
    assert _secret_in_database(app, secret) == []
    response = app.test_client().get("/api/experiments", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200


def test_cli_bad_scope_is_a_clear_error_and_creates_nothing(app, runner):
    """Does an unknown scope fail with a message naming it and create no token?"""
    result = runner.invoke(args=["tokens", "create", "--name", "X", "--scopes", "read,admin"])
    assert result.exit_code != 0
    assert "Unknown scope 'admin'" in result.output
    assert "sk_" not in result.output
    assert _token_rows(app) == []
