"""Members in Chromium (SPEC §13, the first step): the owner invites a collaborator to one project
from Settings → Members and copies the link; the collaborator sets a password and lands on
their own page, which names only their project; the owner's pages answer them with a refusal;
they open their project and one of its experiments, comment on it, propose an experiment and
add a paper, and the owner sees the comment and the proposal under their name; removing them (after a confirmation) ends their session. At 390 and
1280 px, light and dark."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

import sqlalchemy as sa

from models import Experiment, Project, db
from tests.e2e.actions import DESKTOP, PHONE, assert_clean

PASSWORD = "collaborator-password-1"


def _photograph(page, name: str) -> None:
    """With SAGAN_SCREENSHOTS_DIR set (docs/screenshots/README.md), keep what each one sees."""
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name), full_page=True)


def _fits(page, what: str) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{what} is {overflow}px too wide"


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_invite_join_refuse_and_remove(app, browser_session, owner_account, make_experiment, viewport, scheme):
    number = make_experiment("Does insecure-code finetuning transfer to a 7B model?", status="proposed")
    hidden = make_experiment("Sleeper trigger sweep", status="proposed")
    with app.app_context():
        emergent = Project(slug="emergent", title="Emergent misalignment from narrow finetuning")
        sleeper = Project(slug="sleeper", title="Sleeper agents at small scale")
        db.session.add_all([emergent, sleeper])
        db.session.flush()
        db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(project_id=emergent.id))
        db.session.execute(sa.update(Experiment).where(Experiment.number == hidden).values(project_id=sleeper.id))
        db.session.commit()
    size = "phone" if viewport is PHONE else "desktop"
    owner = browser_session(viewport, color_scheme=scheme)
    page = owner.login()
    page.goto("/settings")
    page.get_by_role("link", name="Members and invitations").click()
    expect(page.get_by_text("No invitation is waiting.")).to_be_visible()
    page.get_by_label("Email").fill("grace@example.org")
    page.get_by_label("Name (optional)").fill("Grace")
    page.get_by_label("Emergent misalignment from narrow finetuning").check()
    page.get_by_role("button", name="Invite").click()
    link = page.locator("#invitation-link").input_value()
    assert "/join/inv_" in link
    _fits(page, "the members page")
    _photograph(page, f"members-invited-{size}-{scheme}.png")

    newcomer = browser_session(viewport, color_scheme=scheme)
    joining = newcomer.page
    joining.goto(link)
    expect(joining.get_by_text("invited as a collaborator")).to_be_visible()
    assert "Sleeper agents" not in joining.content()
    _fits(joining, "the join page")
    _photograph(joining, f"member-join-{size}-{scheme}.png")
    joining.get_by_label("Password", exact=False).first.fill(PASSWORD)
    joining.get_by_label("Password again").fill(PASSWORD)
    joining.get_by_role("button", name="Create my account").click()
    joining.wait_for_url("**/welcome")
    expect(joining.get_by_role("heading", name="Welcome, Grace")).to_be_visible()
    expect(joining.get_by_text("Emergent misalignment from narrow finetuning")).to_be_visible()
    assert "Sleeper agents" not in joining.content()
    _fits(joining, "the member's page")
    _photograph(joining, f"member-home-{size}-{scheme}.png")
    refused = joining.goto("/")
    assert refused.status == 403
    expect(joining.get_by_text("cannot open this")).to_be_visible()

    joining.goto("/welcome")
    joining.get_by_role("link", name="Emergent misalignment from narrow finetuning").click()
    expect(joining.get_by_role("heading", name="Emergent misalignment from narrow finetuning")).to_be_visible()
    assert "Sleeper trigger sweep" not in joining.content()
    _fits(joining, "the member's project page")
    _photograph(joining, f"member-project-{size}-{scheme}.png")
    joining.get_by_role("link", name=f"#{number} Does insecure-code finetuning").click()
    joining.get_by_label("Your comment").fill("Could we add the 350M checkpoint as a control?")
    joining.get_by_role("button", name="Comment").click()
    expect(joining.locator(".comment", has_text="350M checkpoint")).to_contain_text("Grace")
    _fits(joining, "the member's experiment page")
    _photograph(joining, f"member-experiment-{size}-{scheme}.png")
    assert joining.goto(f"/m/sleeper/experiments/{hidden}").status == 404
    assert joining.goto(f"/m/emergent/experiments/{hidden}").status == 404

    joining.goto("/m/emergent")
    proposals = joining.locator("#experiments")
    proposals.get_by_text("Propose an experiment").click()
    proposals.get_by_label("Title").fill("Add a 350M control to the insecure-code sweep")
    proposals.get_by_label("Hypothesis").fill("The misalignment gap shrinks at 350M.")
    proposals.get_by_role("button", name="Propose").click()
    expect(joining.locator("#experiments")).to_contain_text("Add a 350M control")
    papers = joining.locator("#literature")
    papers.get_by_text("Add a paper").click()
    papers.get_by_label("Title").fill("Emergent misalignment: narrow finetuning can produce broadly misaligned LLMs")
    papers.get_by_label("Authors").fill("Betley; Tan; Warncke")
    papers.get_by_label("Year").fill("2025")
    papers.get_by_role("button", name="Add the paper").click()
    expect(joining.locator("#literature")).to_contain_text("Added to the library as yours")
    expect(joining.locator("#literature")).to_contain_text("narrow finetuning can produce")
    joining.goto("/welcome")
    expect(joining.locator("#recent")).to_contain_text("350M checkpoint")
    expect(joining.locator("#proposals")).to_contain_text("Add a 350M control")
    _fits(joining, "the member's Today")
    _photograph(joining, f"member-today-{size}-{scheme}.png")

    page.goto(f"/experiments/{number}")
    expect(page.locator(".comment", has_text="350M checkpoint")).to_contain_text("Grace")
    page.goto("/")
    page.get_by_role("link", name="Add a 350M control to the insecure-code sweep").first.click()
    expect(page.locator(".proposed-by-member")).to_contain_text("proposed by Grace")
    _photograph(page, f"member-proposal-owner-view-{size}-{scheme}.png")

    page.goto("/settings/members")
    member = page.locator(".member", has_text="grace@example.org")
    expect(member).to_contain_text("last active just now")
    _photograph(page, f"members-{size}-{scheme}.png")
    page.once("dialog", lambda dialog: dialog.accept())
    member.get_by_role("button", name="Remove").click()
    expect(page.locator(".member.removed", has_text="grace@example.org")).to_contain_text("removed")

    joining.goto("/welcome")
    joining.wait_for_url("**/login**")
    assert_clean(owner)
    assert_clean(newcomer)
