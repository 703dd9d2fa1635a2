"""Members through the API (SPEC §13, issue 29): their own tokens, the member routes under
/api/m/ scoped to their projects, and typed links they propose. Another project's record
answers as one that does not exist, by number, uuid and list filter alike."""
from __future__ import annotations

import re
import uuid

import sqlalchemy as sa

from models import ApiToken, User, db
from tests.conftest import csrf_from


def _mint(member, name="notebook", scopes=("read",)):
    page = member.get("/welcome/tokens")
    return member.post("/welcome/tokens", data={"name": name, "scopes": list(scopes),
                                                "csrf_token": csrf_from(page.text)})


def _secret(html: str) -> str:
    return re.search(r'value="(sk_[^"]+)"', html).group(1)


def test_a_member_mints_sees_once_and_revokes_their_own_token(app, client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    empty = ada.get("/welcome/tokens")
    assert empty.status_code == 200 and "You hold no tokens" in empty.text
    assert empty.headers["Cache-Control"] == "no-store"
    # The role's scopes are offered, and only those.
    assert 'value="read"' in empty.text and 'value="write"' in empty.text
    assert 'value="dispatch"' not in empty.text and 'value="promote"' not in empty.text
    minted = _mint(ada, scopes=("read", "write"))
    assert minted.status_code == 303
    shown = ada.get("/welcome/tokens")
    secret = _secret(shown.text)
    assert "Copy your new token now" in shown.text
    assert secret not in ada.get("/welcome/tokens").text  # once
    with app.app_context():
        token = db.session.scalar(sa.select(ApiToken).where(ApiToken.user_id == ada.member_id))
        assert token.scopes == ["read", "write"]
        token_id = token.id
    assert app.test_client().get("/api/m/projects", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    # The owner's Members page counts it.
    assert "1 API token" in client.get("/settings/members").text
    page = ada.get("/welcome/tokens")
    revoked = ada.post(f"/welcome/tokens/{token_id}/revoke", data={"csrf_token": csrf_from(page.text)})
    assert revoked.status_code == 303
    assert app.test_client().get("/api/m/projects", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    assert "0 API tokens" in client.get("/settings/members").text


def test_a_token_beyond_the_role_or_without_a_name_is_refused_and_nothing_is_made(app, two_projects,
                                                                                   member_client):
    mentor = member_client("mo@example.org", "mentor")
    for scopes, name, said in ((("read", "write"), "x", "cannot hold the &#39;write&#39; scope"),
                               (("dispatch",), "x", "cannot hold the &#39;dispatch&#39; scope"),
                               (("bogus",), "x", "Unknown scope"),
                               ((), "x", "Choose at least one scope"),
                               (("read",), "   ", "Give the token a name")):
        answer = _mint(mentor, name=name, scopes=scopes)
        assert answer.status_code == 303, scopes
        assert said in mentor.get("/welcome/tokens").text, scopes
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(ApiToken)
                                 .where(ApiToken.user_id == mentor.member_id)) == 0


def test_a_member_cannot_revoke_anothers_token(app, client, api_client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    bob = member_client("bob@example.org", "collaborator")
    _mint(bob)
    owners = api_client("read")
    with app.app_context():
        bobs = db.session.scalar(sa.select(ApiToken.id).where(ApiToken.user_id == bob.member_id))
    page = ada.get("/welcome/tokens")
    for token_id in (bobs, owners.token_id, uuid.uuid4()):
        answer = ada.post(f"/welcome/tokens/{token_id}/revoke", data={"csrf_token": csrf_from(page.text)})
        assert answer.status_code == 404, token_id
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(ApiToken)
                                 .where(ApiToken.revoked_at.is_not(None))) == 0
    # The owner's session is sent to the owner's own tokens page.
    assert client.get("/welcome/tokens").headers["Location"].endswith("/api-tokens")


def test_removing_a_member_ends_the_token_they_minted(app, client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    _mint(ada)
    secret = _secret(ada.get("/welcome/tokens").text)
    page = client.get("/settings/members")
    client.post(f"/settings/members/{ada.member_id}/remove", data={"csrf_token": csrf_from(page.text)})
    assert app.test_client().get("/api/m/projects", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    with app.app_context():
        assert db.session.get(User, ada.member_id).removed_at is not None
