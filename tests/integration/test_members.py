"""Members (SPEC §13), the first step: invitations that expire and work once, the join form
with the owner's password rules, Settings → Members (roles, projects, last activity), and
removal ending a member's sessions and tokens at once. Every bad form changes nothing."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import ApiToken, Invitation, MemberProject, User, db
from services.core import auth as auth_service
from services.core import clock, members, permissions
from services.core.errors import Forbidden, ValidationError
from tests.conftest import csrf_from
from tests.integration.members_fixtures import MEMBER_PASSWORD, invite, login, owner_account


def _counts(app) -> dict:
    with app.app_context():
        return {model.__tablename__: db.session.scalar(sa.select(sa.func.count()).select_from(model))
                for model in (User, Invitation, MemberProject, ApiToken)}


def _member(app, email: str) -> User:
    with app.app_context():
        user = db.session.scalar(sa.select(User).where(User.email == email))
        db.session.expunge(user)
        return user


# --- inviting --------------------------------------------------------------------------------

def test_the_owner_invites_and_sees_the_link_once(app, client, two_projects):
    """The invite form stores an invitation and shows its link once (no email is set up);
    a reload shows it no more, and the page lists the invitation as pending."""
    page = client.get("/settings/members")
    assert page.status_code == 200 and "Invite someone" in page.text and "No invitation is waiting" in page.text
    sent = client.post("/settings/members/invite", data={
        "email": "Ada@Example.org", "display_name": "Ada", "role": "collaborator", "projects": [two_projects[0]],
        "csrf_token": csrf_from(page.text)})
    assert sent.status_code == 303
    shown = client.get("/settings/members")
    assert "Copy the invitation link now" in shown.text and "/join/inv_" in shown.text
    assert shown.headers["Cache-Control"] == "no-store"
    again = client.get("/settings/members")
    assert "/join/inv_" not in again.text and "ada@example.org" in again.text and "Alpha project" in again.text
    with app.app_context():
        invitation = db.session.scalar(sa.select(Invitation))
        assert invitation.email == "ada@example.org" and invitation.role == "collaborator"
        assert invitation.project_ids == [two_projects[0]]
        assert "inv_" not in invitation.token_hash  # only the hash is kept


def test_an_email_sender_takes_the_invitation_when_one_is_set_up(app, client, two_projects, monkeypatch):
    """The hook for email: a registered sender gets the invitation and its link, and the page
    then says it was sent instead of showing the link."""
    sent = []
    monkeypatch.setattr(members, "invitation_senders", [lambda invitation, link: sent.append((invitation.email,
                                                                                              link)) or True])
    page = client.get("/settings/members")
    client.post("/settings/members/invite", data={"email": "bo@example.org", "role": "mentor",
                                                  "projects": [two_projects[1]], "csrf_token": csrf_from(page.text)})
    shown = client.get("/settings/members")
    assert "Invitation sent" in shown.text and "/join/inv_" not in shown.text
    assert sent[0][0] == "bo@example.org" and "/join/inv_" in sent[0][1]


@pytest.mark.parametrize("form, message", [
    ({"email": "not-an-address", "role": "collaborator"}, "valid email"),
    ({"email": "c@example.org", "role": "owner"}, "Choose a role"),
    ({"email": "c@example.org", "role": "admin"}, "Choose a role"),
    ({"email": "c@example.org", "role": "collaborator", "projects": []}, "at least one project"),
    ({"email": "c@example.org", "role": "collaborator", "projects": ["not-a-uuid"]}, "not a project"),
    ({"email": "c@example.org", "role": "collaborator",
      "projects": ["00000000-0000-4000-8000-000000000009"]}, "does not exist"),
    ({"email": "owner@example.com", "role": "collaborator"}, "already has an account"),
    ({"email": "c@example.org", "role": "collaborator", "display_name": "x" * 121}, "limit is 120"),
])
def test_a_bad_invitation_is_refused_and_stores_nothing(app, client, two_projects, form, message):
    """Each bad invite form answers with its sentence beside the form and stores nothing —
    an invitation for the owner's role (which no inviter can hand out) included."""
    from tests.conftest import OWNER_EMAIL
    form = dict(form)
    if form["email"] == "owner@example.com":
        form["email"] = OWNER_EMAIL
    form.setdefault("projects", [two_projects[0]])
    before = _counts(app)
    page = client.get("/settings/members")
    refused = client.post("/settings/members/invite", data={**form, "csrf_token": csrf_from(page.text)})
    assert refused.status_code == 303
    assert message in client.get("/settings/members").text
    assert _counts(app) == before


def test_only_the_owner_may_invite(app, two_projects, member_client):
    """A member cannot invite, through the page or the service, even to their own project."""
    collaborator = member_client("cy@example.org")
    page = collaborator.get("/welcome")
    refused = collaborator.post("/settings/members/invite", data={
        "email": "friend@example.org", "role": "collaborator", "projects": [two_projects[0]],
        "csrf_token": csrf_from(page.text)})
    assert refused.status_code == 403
    with app.app_context():
        member = db.session.get(User, collaborator.member_id)
        with pytest.raises(Forbidden):
            members.invite(member, "friend@example.org", "collaborator", [two_projects[0]])
    assert _counts(app)["invitations"] == 1  # the collaborator's own, spent


# --- joining -----------------------------------------------------------------------------------

def test_joining_sets_a_password_and_signs_the_member_in(app, client, two_projects):
    """The link's page names the role and projects; the form makes an account with an argon2
    hash, the invitation's role and projects, and signs the new member in to their page."""
    token = invite(app, "dee@example.org", "collaborator", [two_projects[0]])
    newcomer = app.test_client()
    page = newcomer.get(f"/join/{token}")
    assert page.status_code == 200 and "collaborator" in page.text and "Alpha project" in page.text
    assert "Beta project" not in page.text
    assert page.headers["Referrer-Policy"] == "no-referrer" and page.headers["Cache-Control"] == "no-store"
    joined = newcomer.post(f"/join/{token}", data={"display_name": "Dee", "password": MEMBER_PASSWORD,
                                                    "confirm": MEMBER_PASSWORD, "csrf_token": csrf_from(page.text)})
    assert joined.status_code == 303 and joined.headers["Location"].endswith("/welcome")
    home = newcomer.get("/welcome")
    assert home.status_code == 200 and "Welcome, Dee" in home.text and "Alpha project" in home.text
    assert "Beta project" not in home.text and "Settings" not in home.text  # not the owner's header
    member = _member(app, "dee@example.org")
    assert member.role == "collaborator" and member.password_hash.startswith("$argon2id$")
    with app.app_context():
        assert [str(p) for p in db.session.scalars(sa.select(MemberProject.project_id))] == [two_projects[0]]


@pytest.mark.parametrize("form, message, status", [
    ({"password": "short", "confirm": "short"}, "at least 10 characters", 400),
    ({"password": MEMBER_PASSWORD, "confirm": MEMBER_PASSWORD + "x"}, "differ", 400),
    ({"password": MEMBER_PASSWORD, "confirm": MEMBER_PASSWORD, "display_name": "y" * 121}, "limit is 120", 400),
])
def test_a_bad_join_form_makes_no_account_and_keeps_the_link(app, two_projects, form, message, status):
    """A short or mismatched password answers the form again with the sentence; nothing is
    made and the link still works."""
    token = invite(app, "eve@example.org", "mentor", [two_projects[1]])
    newcomer = app.test_client()
    page = newcomer.get(f"/join/{token}")
    answer = newcomer.post(f"/join/{token}", data={"display_name": "Eve", **form, "csrf_token": csrf_from(page.text)})
    assert answer.status_code == status and message in answer.text
    with app.app_context():
        assert db.session.scalar(sa.select(User).where(User.email == "eve@example.org")) is None
    assert newcomer.get(f"/join/{token}").status_code == 200


def test_the_join_form_needs_its_csrf_token(app, two_projects):
    token = invite(app, "fay@example.org", "collaborator", [two_projects[0]])
    newcomer = app.test_client()
    newcomer.get(f"/join/{token}")
    answer = newcomer.post(f"/join/{token}", data={"password": MEMBER_PASSWORD, "confirm": MEMBER_PASSWORD})
    assert answer.status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(User).where(User.email == "fay@example.org")) is None


def _join(app, token: str, email: str):
    client = app.test_client()
    page = client.get(f"/join/{token}")
    if page.status_code != 200:
        return page
    return client.post(f"/join/{token}", data={"display_name": email, "password": MEMBER_PASSWORD,
                                               "confirm": MEMBER_PASSWORD, "csrf_token": csrf_from(page.text)})


def test_a_used_link_works_no_more(app, two_projects):
    """The second use of a link answers 404 with the one sentence, and makes no second account."""
    token = invite(app, "gus@example.org", "collaborator", [two_projects[0]])
    assert _join(app, token, "gus@example.org").status_code == 303
    again = _join(app, token, "gus@example.org")
    assert again.status_code == 404 and "already used, it expired, or it was withdrawn" in again.text
    assert _counts(app)["users"] == 2


def test_accepting_twice_at_once_makes_one_account(app, two_projects):
    """Two requests that both found the link usable: the second's conditional spend fails."""
    token = invite(app, "hal@example.org", "collaborator", [two_projects[0]])
    with app.app_context():
        members.open_invitation(token)  # both "tabs" saw a usable link…
        members.accept(token, "Hal", MEMBER_PASSWORD, MEMBER_PASSWORD)
        db.session.commit()
        from services.core.errors import NotFound
        with pytest.raises(NotFound):
            members.accept(token, "Hal", MEMBER_PASSWORD, MEMBER_PASSWORD)
        db.session.rollback()
    assert _counts(app)["users"] == 2


def test_an_expired_withdrawn_or_made_up_link_answers_404(app, client, two_projects):
    expired = invite(app, "ivy@example.org", "collaborator", [two_projects[0]])
    withdrawn = invite(app, "jo@example.org", "collaborator", [two_projects[0]])
    with app.app_context():
        pending = db.session.scalar(sa.select(Invitation).where(Invitation.email == "jo@example.org"))
        pending_id = pending.id
    page = client.get("/settings/members")
    assert client.post(f"/settings/invitations/{pending_id}/withdraw",
                       data={"csrf_token": csrf_from(page.text)}).status_code == 303
    clock.advance(members.INVITATION_LIFETIME + timedelta(seconds=1))
    for token in (expired, withdrawn, "inv_made-up", "not-even-the-prefix"):
        answer = _join(app, token, "x@example.org")
        assert answer.status_code == 404 and "Ask for a new one" in answer.text, token
    assert _counts(app)["users"] == 1
    assert "expired" in client.get("/settings/members").text


def test_a_new_invitation_to_the_same_address_withdraws_the_old(app, two_projects):
    first = invite(app, "kit@example.org", "collaborator", [two_projects[0]])
    second = invite(app, "kit@example.org", "mentor", [two_projects[1]])
    assert _join(app, first, "kit@example.org").status_code == 404
    assert _join(app, second, "kit@example.org").status_code == 303
    assert _member(app, "kit@example.org").role == "mentor"


# --- the members page: roles, projects, last activity ---------------------------------------------

def test_the_members_page_lists_roles_projects_and_last_activity(app, client, member_client):
    lee = member_client("lee@example.org", "mentor", projects=(1,))
    clock.advance(timedelta(minutes=5))
    page = client.get("/settings/members")
    assert "lee@example.org" in page.text and "mentor" in page.text and "last active 5m ago" in page.text
    lee.get("/welcome")  # a request more than a minute later is the new last activity
    assert "last active just now" in client.get("/settings/members").text
    clock.advance(timedelta(seconds=30))
    lee.get("/welcome")  # …but within the minute it writes nothing
    clock.advance(timedelta(seconds=50))
    assert "last active 1m ago" in client.get("/settings/members").text


def test_the_owner_changes_a_role_and_projects(app, client, two_projects, member_client):
    """A new role and project list hold from the member's next request; a token beyond the
    new role's scopes is revoked."""
    max_ = member_client("max@example.org", "collaborator", projects=(0,))
    with app.app_context():
        member = db.session.get(User, max_.member_id)
        _token, _secret = auth_service.create_token("laptop", "read,write", member)
        db.session.commit()
    page = client.get("/settings/members")
    changed = client.post(f"/settings/members/{max_.member_id}", data={
        "role": "mentor", "projects": [two_projects[1]], "csrf_token": csrf_from(page.text)})
    assert changed.status_code == 303
    home = max_.get("/welcome")
    assert "mentor" in home.text and "Beta project" in home.text and "Alpha project" not in home.text
    with app.app_context():
        assert db.session.scalar(sa.select(ApiToken.revoked_at)) is not None  # write exceeds a mentor


@pytest.mark.parametrize("form, message", [
    ({"role": "owner"}, "Choose a role"),
    ({"role": "collaborator", "projects": []}, "at least one project"),
])
def test_a_bad_change_is_refused_and_changes_nothing(app, client, two_projects, member_client, form, message):
    nia = member_client("nia@example.org")
    form = {"projects": [two_projects[1]], **form}
    page = client.get("/settings/members")
    client.post(f"/settings/members/{nia.member_id}", data={**form, "csrf_token": csrf_from(page.text)})
    assert message in client.get("/settings/members").text
    assert _member(app, "nia@example.org").role == "collaborator"
    assert "Alpha project" in nia.get("/welcome").text


def test_the_owner_account_cannot_be_changed_or_removed_as_a_member(app, client, owner):
    with app.app_context():
        owner = owner_account(app)
        owner_id = owner.id
        for action in (lambda: members.remove(owner, owner_id), lambda: members.change(owner, owner_id, "mentor", [])):
            with pytest.raises(ValidationError):
                action()
        db.session.rollback()
    page = client.get("/settings/members")
    assert client.post(f"/settings/members/{owner_id}/remove", data={"csrf_token": csrf_from(page.text)}
                       ).status_code == 400
    assert client.get("/settings/members").status_code == 200  # still the owner


# --- removal ends everything at once ------------------------------------------------------------------

def test_removing_a_member_ends_their_session_and_token_at_once(app, client, member_client):
    """After removal the member's old cookie lands on the login page, their old token gets
    401, and their password no longer signs in; the page shows them as removed."""
    oli = member_client("oli@example.org")
    with app.app_context():
        member = db.session.get(User, oli.member_id)
        token, secret = auth_service.create_token("script", "read", member)
        db.session.commit()
    stolen = app.test_client()
    stolen.set_cookie("session", oli.get_cookie("session").value)
    assert stolen.get("/welcome").status_code == 200
    page = client.get("/settings/members")
    assert 'data-confirm="Remove oli' in page.text  # asked before it happens
    assert client.post(f"/settings/members/{oli.member_id}/remove",
                       data={"csrf_token": csrf_from(page.text)}).status_code == 303
    for browser in (oli, stolen):
        answer = browser.get("/welcome")
        assert answer.status_code == 302 and answer.headers["Location"].startswith("/login")
    bearer = app.test_client().get("/api/statuses", headers={"Authorization": f"Bearer {secret}"})
    assert bearer.status_code == 401 and bearer.get_json()["error"] == "invalid_token"
    assert login(app.test_client(), "oli@example.org").status_code == 401
    assert "removed" in client.get("/settings/members").text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(MemberProject)) == 0


def test_a_removed_members_token_is_dead_even_if_its_revocation_were_missed(app, member_client):
    """verify_token reads the holder's removal in the same statement (defence in depth)."""
    pat = member_client("pat@example.org")
    with app.app_context():
        member = db.session.get(User, pat.member_id)
        _token, secret = auth_service.create_token("script", "read", member)
        member.removed_at = clock.utcnow()
        db.session.commit()
        assert auth_service.verify_token(secret) is None


# --- what a member reaches now ---------------------------------------------------------------------

def test_a_member_signs_in_to_their_own_page_and_out_again(app, two_projects, member_client):
    quinn = member_client("quinn@example.org")
    fresh = app.test_client()
    signed_in = login(fresh, "quinn@example.org")
    assert signed_in.status_code == 302 and signed_in.headers["Location"] == "/welcome"
    page = fresh.get("/welcome")
    out = fresh.post("/logout", data={"csrf_token": csrf_from(page.text)})
    assert out.status_code == 303
    assert fresh.get("/welcome").status_code == 302
    assert quinn.get("/welcome").status_code == 302  # signing out ends every copy of the session


def test_a_member_gets_403_on_owner_pages_htmx_and_api(app, make_experiment, member_client):
    """The board, an experiment, an htmx action and the session API are the owner's: a
    member gets 403 with a sentence (a page, JSON, or for htmx the toast's message)."""
    number = make_experiment("Owner's experiment", status="proposed")
    rae = member_client("rae@example.org")
    page = rae.get("/")
    assert page.status_code == 403 and "cannot open this" in page.text and "Owner's experiment" not in page.text
    assert rae.get(f"/experiments/{number}").status_code == 403
    csrf = csrf_from(rae.get("/welcome").text)
    moved = rae.post(f"/experiments/{number}/status", data={"to": "planning"},
                     headers={"HX-Request": "true", "X-CSRFToken": csrf})
    assert moved.status_code == 403 and moved.headers["X-Sagan-Error"] == "not_for_your_role"
    api = rae.get("/api/experiments", headers={"Accept": "application/json"})
    assert api.status_code == 403 and api.get_json()["error"] == "not_for_your_role"


def test_a_members_session_gets_no_quiet_poll_answer(app, client, make_experiment, member_client):
    """The lean poll path checks the session itself: a member's cookie with the page's real
    version must not get the owner's 304 (it goes on to the access rule: 403)."""
    import re
    number = make_experiment("Polled", status="proposed")
    version = re.search(r'data-version="([0-9a-f]+)"', client.get(f"/experiments/{number}").text).group(1)
    sam = member_client("sam@example.org")
    answer = sam.get(f"/experiments/{number}/live", headers={"If-None-Match": f'"{version}"', "HX-Request": "true"})
    assert answer.status_code == 403


def test_a_members_session_gets_no_quiet_answer_from_todays_poll(app, client, member_client):
    """Today's poll is the owner's too: a member's cookie with Today's real version goes on to
    the access rule (403), never to the owner's 304."""
    import re
    version = re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)
    assert client.get("/today/live", headers={"If-None-Match": f'"{version}"'}).status_code == 304
    sam = member_client("sam@example.org")
    assert sam.get("/today/live", headers={"If-None-Match": f'"{version}"'}).status_code == 403


def test_a_members_token_opens_no_api_route_and_never_exceeds_the_role(app, member_client):
    """A collaborator's token holds read and write at most (a mentor's, read), and opens no
    API route yet (none is opened to members): each answers 403 not_for_your_role."""
    tia = member_client("tia@example.org")
    ute = member_client("ute@example.org", "mentor", projects=(1,))
    with app.app_context():
        collaborator = db.session.get(User, tia.member_id)
        mentor = db.session.get(User, ute.member_id)
        for holder, scopes in ((collaborator, "read,dispatch"), (collaborator, "promote"), (mentor, "write")):
            with pytest.raises(ValidationError, match="cannot hold"):
                auth_service.create_token("too much", scopes, holder)
        _token, secret = auth_service.create_token("ok", "read,write", collaborator)
        db.session.commit()
    answer = app.test_client().get("/api/experiments", headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 403 and answer.get_json()["error"] == "not_for_your_role"


# --- the role table --------------------------------------------------------------------------------

def test_the_role_table(app, two_projects):
    """Owner: everything. Collaborator: reads and proposals on their projects only. Mentor:
    reads results and narratives, comments. No member approves, dispatches, spends,
    promotes, changes settings or reads agent logs; a removed account may do nothing."""
    from models import Experiment
    for action in permissions.NEVER_FOR_MEMBERS:
        assert permissions.role_may("owner", action)
        assert not permissions.role_may("collaborator", action) and not permissions.role_may("mentor", action)
    assert permissions.role_may("collaborator", "propose_experiment")
    assert not permissions.role_may("mentor", "propose_experiment")
    assert permissions.role_may("mentor", "comment") and permissions.role_may("mentor", "read_result")
    assert not permissions.role_may(None, permissions.SIGNED_IN) and not permissions.role_may("admin", "comment")
    with app.app_context():
        collaborator = User(email="v@example.org", password_hash="x", role="collaborator")
        collaborator._member_project_ids = frozenset({uuid.UUID(two_projects[0])})
        mine = Experiment(title="mine", project_id=uuid.UUID(two_projects[0]))
        theirs = Experiment(title="theirs", project_id=uuid.UUID(two_projects[1]))
        loose = Experiment(title="no project")
        assert permissions.can(collaborator, "read_experiment", mine)
        assert not permissions.can(collaborator, "read_experiment", theirs)
        assert not permissions.can(collaborator, "read_experiment", loose)
        assert not permissions.can(collaborator, "dispatch", mine)
        owner = owner_account(app)
        assert permissions.can(owner, "dispatch", theirs) and permissions.can(owner, "read_experiment", loose)
        collaborator.removed_at = clock.utcnow()
        assert not permissions.can(collaborator, "read_experiment", mine)
        assert not permissions.can(None, "read_experiment", mine)


def test_a_removed_member_can_be_invited_again(app, client, two_projects, member_client):
    """Removal keeps the row; a new invitation brings the same account back with the new role,
    projects and password — and nothing of the old: its tokens stay revoked, its cookie dead."""
    rex = member_client("rex@example.org", "collaborator", projects=(0,))
    with app.app_context():
        _token, old_secret = auth_service.create_token("old", "read", db.session.get(User, rex.member_id))
        db.session.commit()
    page = client.get("/settings/members")
    client.post(f"/settings/members/{rex.member_id}/remove", data={"csrf_token": csrf_from(page.text)})
    token = invite(app, "rex@example.org", "mentor", [two_projects[1]])
    assert _join(app, token, "rex@example.org").status_code == 303
    back = _member(app, "rex@example.org")
    assert back.id == rex.member_id and back.role == "mentor" and back.removed_at is None
    assert rex.get("/welcome").status_code == 302  # the old session stays ended
    assert app.test_client().get("/api/statuses", headers={"Authorization": f"Bearer {old_secret}"}).status_code == 401
    fresh = app.test_client()
    assert login(fresh, "rex@example.org").status_code == 302
    home = fresh.get("/welcome").text
    assert "Beta project" in home and "Alpha project" not in home
