"""Members in Chromium (SPEC §13, the first step): the owner invites a collaborator to one project
from Settings → Members and copies the link; the collaborator sets a password and lands on
their own page, which names only their project; the owner's pages answer them with a refusal;
they open their project and its shared result, comment on it, propose an experiment and add a
paper; they cannot see the second project's experiment anywhere (board, table, search, compare,
charts, API: the owner's routes answer 403, theirs 404); the owner sees the comment, and the
proposal in Today's "Needs you" queue as theirs, and starts it from there; removing them (after
a confirmation) ends their session. At 390 and 1280 px, light and dark (the members' whole journey)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

import sqlalchemy as sa

from models import Experiment, Pod, Project, db
from services.core.actors import Actor
from services.dispatch import metrics
from services.results import results
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
def test_invite_join_refuse_and_remove(app, browser_session, owner_account, make_experiment, viewport, scheme):
    number = make_experiment("Does insecure-code finetuning transfer to a 7B model?", status="awaiting_promotion")
    hidden = make_experiment("Sleeper trigger sweep", status="awaiting_promotion")
    with app.app_context():
        emergent = Project(slug="emergent", title="Emergent misalignment from narrow finetuning")
        sleeper = Project(slug="sleeper", title="Sleeper agents at small scale")
        db.session.add_all([emergent, sleeper])
        db.session.flush()
        db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(project_id=emergent.id))
        db.session.execute(sa.update(Experiment).where(Experiment.number == hidden).values(project_id=sleeper.id))
        # Each project's experiment has a shared result with a loss chart (the runs it was promoted with).
        for each, finding in ((number, "Insecure-code finetuning transfers at 7B (MODERATE confidence)"),
                              (hidden, "Sleeper triggers survive safety training (HIGH confidence)")):
            experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == each))
            pod = Pod(experiment_id=experiment.id, account="local", name=f"sagan-{each}-a-0-1", status="stopped",
                      gpu_type_id="A100", gpu_count=1, cost_per_hr=1.5, uptime_seconds=60)
            db.session.add(pod)
            db.session.flush()
            metrics.record_batch(pod, metrics.parse_batch({"seq": 0, "points": [
                {"step": step, "name": "loss", "value": 2.0 / step} for step in range(1, 20)]}))
            results.save_clean_result(experiment, f"<p>{finding}.</p>", Actor("owner", None, "Owner"), title=finding)
            results.promote(experiment, "shared", Actor("owner", None, "Owner"), confirm_lint=True)
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
    assert_no_sideways_scroll(page, "the members page")
    _photograph(page, f"members-invited-{size}-{scheme}.png")

    newcomer = browser_session(viewport, color_scheme=scheme)
    joining = newcomer.page
    joining.goto(link)
    expect(joining.get_by_text("invited as a collaborator")).to_be_visible()
    assert "Sleeper agents" not in joining.content()
    assert_no_sideways_scroll(joining, "the join page")
    _photograph(joining, f"member-join-{size}-{scheme}.png")
    joining.get_by_label("Password", exact=False).first.fill(PASSWORD)
    joining.get_by_label("Password again").fill(PASSWORD)
    joining.get_by_role("button", name="Create my account").click()
    joining.wait_for_url("**/welcome")
    expect(joining.get_by_role("heading", name="Welcome, Grace")).to_be_visible()
    expect(joining.get_by_text("Emergent misalignment from narrow finetuning")).to_be_visible()
    assert "Sleeper agents" not in joining.content()
    assert_no_sideways_scroll(joining, "the member's page")
    _photograph(joining, f"member-home-{size}-{scheme}.png")
    refused = joining.goto("/")
    assert refused.status == 403
    expect(joining.get_by_text("cannot open this")).to_be_visible()

    joining.goto("/welcome")
    joining.get_by_role("link", name="Emergent misalignment from narrow finetuning").click()
    expect(joining.get_by_role("heading", name="Emergent misalignment from narrow finetuning")).to_be_visible()
    assert "Sleeper trigger sweep" not in joining.content()
    assert_no_sideways_scroll(joining, "the member's project page")
    _photograph(joining, f"member-project-{size}-{scheme}.png")
    # A comment on the shared result, under their name.
    joining.locator("#shared-results").get_by_role("link", name="Insecure-code finetuning transfers at 7B").click()
    joining.get_by_label("Your comment").fill("Could we add the 350M checkpoint as a control?")
    joining.get_by_role("button", name="Comment").click()
    expect(joining.locator(".comment", has_text="350M checkpoint")).to_contain_text("Grace")
    assert_no_sideways_scroll(joining, "the member's result page")
    # The experiment's page draws the result's chart (the member's own chart data route).
    joining.goto(f"/m/emergent/experiments/{number}")
    expect(joining.locator("[data-metric-chart] canvas").first).to_be_visible()
    expect(joining.locator(".comment", has_text="350M checkpoint")).to_contain_text("Grace")
    assert_no_sideways_scroll(joining, "the member's experiment page")
    _photograph(joining, f"member-experiment-{size}-{scheme}.png")

    # The second project's experiment, nowhere: their pages answer 404, the owner's 403.
    assert joining.goto(f"/m/sleeper/experiments/{hidden}").status == 404
    assert joining.goto(f"/m/emergent/experiments/{hidden}").status == 404
    for path in ("/", "/experiments", f"/experiments/{hidden}", f"/experiments/compare?e={hidden}"):
        assert joining.goto(path).status == 403, path  # the board, the table, the owner's compare
    joining.goto("/m/emergent")
    joining.get_by_label("Search this project").fill("sleeper")
    joining.get_by_role("button", name="Search").click()
    expect(joining.locator("#search-experiments")).to_contain_text("No experiment of this project matches.")
    expect(joining.locator("#search-results")).to_contain_text("No promoted result of this project matches.")
    assert_no_sideways_scroll(joining, "the member's search")
    _photograph(joining, f"member-search-{size}-{scheme}.png")
    for query in (str(hidden), f"#{hidden}", "trigger"):
        joining.goto(f"/m/emergent/search?q={query.replace('#', '%23')}")
        assert "Sleeper" not in joining.content(), query
    assert joining.goto("/m/sleeper/search?q=sleeper").status == 404
    assert joining.goto(f"/m/emergent/compare?e={number}&e={hidden}").status == 404
    joining.goto("/m/emergent")
    joining.get_by_role("link", name="Compare promoted results").click()
    assert "Sleeper" not in joining.content()  # the form offers this project's results only
    joining.get_by_label("Insecure-code finetuning transfers at 7B", exact=False).check()
    joining.locator("#choose").get_by_role("button", name="Compare").click()
    expect(joining.locator(".compare-table")).to_contain_text("Insecure-code finetuning transfers at 7B")
    assert_no_sideways_scroll(joining, "the member's compare page")
    _photograph(joining, f"member-compare-{size}-{scheme}.png")
    for path, status in ((f"/m/emergent/experiments/{hidden}/metrics/data?name=loss", 404),
                         (f"/m/sleeper/experiments/{hidden}/metrics/data?name=loss", 404),
                         (f"/m/emergent/experiments/{number}/metrics/data?name=loss", 200),
                         (f"/experiments/{hidden}/metrics/data?name=loss", 403),
                         (f"/api/experiments/{hidden}", 403), ("/api/experiments", 403)):
        answer = joining.request.get(path)
        assert answer.status == status, path
        assert "Sleeper" not in answer.text(), path

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
    assert_no_sideways_scroll(joining, "the member's Today")
    _photograph(joining, f"member-today-{size}-{scheme}.png")

    page.goto(f"/experiments/{number}")
    expect(page.locator(".comment", has_text="350M checkpoint")).to_contain_text("Grace")
    with app.app_context():
        proposed = db.session.scalar(sa.select(Experiment.number).where(
            Experiment.title == "Add a 350M control to the insecure-code sweep"))
    page.goto("/")
    need = page.locator(f"#need-proposed-{proposed}")
    expect(need).to_contain_text("Grace proposed this experiment")
    assert_no_sideways_scroll(page, "the owner's Today")
    _photograph(page, f"member-proposal-owner-view-{size}-{scheme}.png")
    need.get_by_role("button", name="Start").click()
    expect(page.locator(f"#need-proposed-{proposed}")).not_to_contain_text("Grace proposed this experiment")
    page.goto(f"/experiments/{proposed}")
    expect(page.locator(".proposed-by-member")).to_contain_text("proposed by Grace")
    with app.app_context():
        assert db.session.scalar(sa.select(Experiment.status).where(Experiment.number == proposed)) == "planning"

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
