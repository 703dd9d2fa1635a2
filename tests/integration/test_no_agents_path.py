"""Without a model key the owner carries the experiment: the turn says what to do by hand, the
plan form offers the eleven sections as a template, a refusal names the missing sections, and
the repository rule is said on the Settings form."""
from __future__ import annotations

import re

import sqlalchemy as sa

from models import ApprovalRequest, db
from services.planning import plans
from tests.integration.pages import text


def _written_template() -> str:
    """The template with every guidance line replaced by the owner's own words, and a checklist."""
    written = plans.template()
    for field, line in plans.GUIDANCE.items():
        own = "- [ ] The seeds are fixed in advance" if field == "approval_checklist" else f"My {field} for the run."
        written = written.replace(line, own)
    return written


def test_the_template_alone_is_not_a_plan_and_each_section_left_as_guidance_counts_missing():
    """Does the unedited template read as no sections at all, and one with four sections written
    count four, naming the seven still missing?"""
    untouched = plans.parse(plans.template(), kind="survey")
    assert untouched.data["section_count"] == 0 and not untouched.is_plan
    assert plans.missing_sections(untouched.data) == [title for title, _ in plans.SECTIONS]
    partial = plans.template()
    for field in ("goal", "hypothesis", "prediction", "kill_criterion"):
        partial = partial.replace(plans.GUIDANCE[field], f"Written: {field}.")
    parsed = plans.parse(partial, kind="survey")
    assert parsed.data["section_count"] == 4 and parsed.is_plan
    assert plans.missing_sections(parsed.data) == ["Experimental Setup", "Compute and Hardware", "Artifacts",
                                                    "Verification", "Risks and Red Team", "Likely Clean Result",
                                                    "Approval Checklist"]


def test_with_agents_off_the_turn_is_the_owners_on_the_card_the_page_and_the_stepper(
        app, client, owner, make_experiment, monkeypatch):
    """With no ANTHROPIC_API_KEY, do the board card, the status panel and the stage bar say
    "write the plan" as the owner's turn — and with a key, Sagan's turn as before?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "")
    number = make_experiment("By hand", status="proposed")
    board = text(client.get("/board"))
    card = board.split(f'id="card-{number}"', 1)[1].split("</article>", 1)[0]
    assert "Owner turn: write the plan (agents are off)" in card and "clarify scope" not in card
    page = re.sub(r"<[^>]+>", "", text(client.get(f"/experiments/{number}")))
    assert re.search(r"Next:\s*You\s*— write the plan \(agents are off\)", page)
    assert "Next: Sagan" not in page
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "sk-ant-test-0000000000000000")
    assert "Sagan turn: clarify scope" in text(client.get("/board"))


def test_the_plan_form_offers_the_template_with_guidance(app, client, owner, make_experiment, monkeypatch):
    """Does the plan form carry the eleven sections with their guidance, open when agents are off?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "")
    number = make_experiment("By hand", status="planning")
    page = client.get(f"/experiments/{number}").text
    block = page.split('class="plan-template"', 1)[1].split("</details>", 1)[0]
    assert block.lstrip().startswith("open")
    for title, field in plans.SECTIONS:
        assert f"## {title}" in block and plans.GUIDANCE[field] in block
    assert 'data-use-template="plan-template-' in block


def test_a_short_paste_names_the_missing_sections_in_words(app, client, owner, make_experiment, api_client):
    """Does a two-section paste by the owner say which sections are missing, without the API's
    path — and does an API client get the same names plus where questions go?"""
    number = make_experiment("By hand", status="planning")
    short = "## Goal\nLearn a thing.\n\n## Hypothesis\nIt is true.\n"
    page = text(client.post(f"/experiments/{number}/plan", data={"markdown": short, "csrf_token": owner.csrf()},
                            follow_redirects=True))
    assert "This has 2 of the 11 plan sections" in page
    assert "Missing: Prediction, Kill Criterion, Experimental Setup, Compute and Hardware" in page
    assert "POST /api" not in page and "Start from the template" in page
    answer = api_client("write").post(f"/api/experiments/{number}/plans", json={"markdown": short})
    assert answer.status_code == 422 and answer.get_json()["error"] == "not_a_plan"
    assert "Missing: Prediction" in answer.get_json()["message"] and "POST /api/experiments" in answer.get_json()["message"]


def test_a_new_user_writes_a_plan_from_the_template_and_reaches_approval(app, client, owner, make_experiment,
                                                                        monkeypatch):
    """With no model key, does the template with each line written by the owner (a survey: no
    pods) open an approval request, and the unedited template get refused saying all eleven
    sections are missing?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "")
    number = make_experiment("Which schedules do papers use?", status="planning", kind="survey")
    refused = text(client.post(f"/experiments/{number}/plan",
                               data={"markdown": plans.template(), "csrf_token": owner.csrf()}, follow_redirects=True))
    assert "This has 0 of the 11 plan sections" in refused
    response = client.post(f"/experiments/{number}/plan",
                           data={"markdown": _written_template(), "csrf_token": owner.csrf()})
    assert response.status_code == 303 and "/approvals/" in response.headers["Location"]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(ApprovalRequest.id))) == 1


def test_settings_says_the_local_repository_rule_and_this_servers_answer(app, client, owner, monkeypatch):
    """Does the repository form say when a local path is accepted, and what this server does?"""
    monkeypatch.setitem(app.config, "SAGAN_ALLOW_LOCAL_REPO", False)
    assert "this server does not" in text(client.get("/settings"))
    monkeypatch.setitem(app.config, "SAGAN_ALLOW_LOCAL_REPO", True)
    page = text(client.get("/settings"))
    assert "SAGAN_ALLOW_LOCAL_REPO=1" in page and "this server accepts one" in page
