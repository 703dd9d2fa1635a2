"""Members for tests: projects, an invited account made through the real invitation, and a
client signed in as it through the login form."""
from __future__ import annotations

import pytest

from models import Project, User, db
from services.core import members
from tests.conftest import csrf_from

MEMBER_PASSWORD = "member-password-1"


def add_project(app, slug: str, title: str) -> str:
    with app.app_context():
        project = Project(slug=slug, title=title)
        db.session.add(project)
        db.session.commit()
        return str(project.id)


def owner_account(app) -> User:
    """The owner (the auth fixture made it), detached for services that take an inviter."""
    import sqlalchemy as sa
    user = db.session.scalar(sa.select(User).where(User.role == "owner"))
    assert user is not None
    return user


def invite(app, email: str, role: str, project_ids: list[str]) -> str:
    """Invite through the service as the owner; the link's token."""
    with app.app_context():
        _invitation, token = members.invite(owner_account(app), email, role, project_ids)
        db.session.commit()
        return token


def login(client, email: str, password: str = MEMBER_PASSWORD):
    page = client.get("/login")
    return client.post("/login", data={"email": email, "password": password, "csrf_token": csrf_from(page.text)})


@pytest.fixture
def two_projects(app, owner):
    """Project A and project B, with the owner signed in on `client`."""
    return add_project(app, "alpha", "Alpha project"), add_project(app, "beta", "Beta project")


@pytest.fixture
def member_client(app, two_projects):
    """Factory: a new client signed in as a member of `role` covering `projects` (indices into
    two_projects), made through a real invitation link and the join form."""
    def make(email: str, role: str = "collaborator", projects=(0,)):
        token = invite(app, email, role, [two_projects[i] for i in projects])
        client = app.test_client()
        page = client.get(f"/join/{token}")
        assert page.status_code == 200, page.text
        joined = client.post(f"/join/{token}", data={"display_name": email.split("@")[0], "password": MEMBER_PASSWORD,
                                                     "confirm": MEMBER_PASSWORD, "csrf_token": csrf_from(page.text)})
        assert joined.status_code == 303 and joined.headers["Location"].endswith("/welcome"), joined.text
        with app.app_context():
            import sqlalchemy as sa
            client.member_id = db.session.scalar(sa.select(User.id).where(User.email == email))
        client.email = email
        return client
    return make
