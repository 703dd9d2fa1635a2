"""A member's own API tokens in Chromium: a collaborator opens "Your API tokens"
from their page, mints a token (only their role's scopes are offered), copies the secret shown
once, reads their project through /api/m/ with it (never another project's experiment), and
revokes it after a confirmation; the owner's Members page counts their tokens. At 390 and
1280 px, light and dark."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from playwright.sync_api import expect

from models import Experiment, Project, db
from services.core import members
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll

PASSWORD = "collaborator-password-1"


def _photograph(page, name: str) -> None:
    """With SAGAN_SCREENSHOTS_DIR set (docs/screenshots/README.md), keep what each one sees."""
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name), full_page=True)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_a_member_mints_uses_and_revokes_a_token(app, browser_session, owner_account, make_experiment, viewport,
                                                 scheme):
    ours = make_experiment("Does insecure-code finetuning transfer to a 7B model?", status="proposed")
    theirs = make_experiment("Sleeper trigger sweep", status="proposed")
    with app.app_context():
        emergent = Project(slug="emergent", title="Emergent misalignment from narrow finetuning")
        sleeper = Project(slug="sleeper", title="Sleeper agents at small scale")
        db.session.add_all([emergent, sleeper])
        db.session.flush()
        db.session.execute(sa.update(Experiment).where(Experiment.number == ours).values(project_id=emergent.id))
        db.session.execute(sa.update(Experiment).where(Experiment.number == theirs).values(project_id=sleeper.id))
        from models import User
        inviter = db.session.scalar(sa.select(User).where(User.role == "owner"))
        _invitation, token = members.invite(inviter, "grace@example.org", "collaborator", [str(emergent.id)], "Grace")
        db.session.commit()
    size = "phone" if viewport is PHONE else "desktop"
    member = browser_session(viewport, color_scheme=scheme)
    page = member.page
    page.goto(f"/join/{token}")
    page.get_by_label("Password", exact=False).first.fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_role("button", name="Create my account").click()
    page.wait_for_url("**/welcome")
    page.get_by_role("link", name="Your API tokens").click()
    expect(page.get_by_text("You hold no tokens")).to_be_visible()
    assert page.locator('input[name="scopes"]').count() == 2  # read and write: never dispatch or promote
    page.get_by_label("Name").fill("analysis notebook")
    page.get_by_label("write").check()
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("heading", name="Copy your new token now")).to_be_visible()
    secret = page.locator("#new-secret").input_value()
    assert secret.startswith("sk_")
    assert_no_sideways_scroll(page, "the member's tokens page")
    _photograph(page, f"member-tokens-{size}-{scheme}.png")

    api = page.context.request
    bearer = {"Authorization": f"Bearer {secret}"}
    listed = api.get("/api/m/experiments", headers=bearer)
    assert listed.status == 200
    assert [e["number"] for e in listed.json()["experiments"]] == [ours]
    assert api.get(f"/api/m/experiments/{theirs}", headers=bearer).status == 404
    assert api.get("/api/experiments", headers=bearer).status == 403

    owner = browser_session(viewport, color_scheme=scheme)
    owner_page = owner.login()
    owner_page.goto("/settings/members")
    expect(owner_page.locator(".member", has_text="grace@example.org")).to_contain_text("1 API token")

    page.goto("/welcome/tokens")
    assert secret not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("tr.revoked")).to_contain_text("revoked")
    assert api.get("/api/m/experiments", headers=bearer).status == 401
    owner_page.reload()
    expect(owner_page.locator(".member", has_text="grace@example.org")).to_contain_text("0 API tokens")
    assert_clean(member)
    assert_clean(owner)
