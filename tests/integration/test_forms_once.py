"""Forms safe to reload and to press twice: every full-page form answers a
redirect (post/redirect/get), each form that creates something carries a one-time key so the
same post a second time creates nothing, a refused post frees its key, and approving needs a
plan's approval request on every path."""
from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, ApiToken, Experiment, PlanVersion, ShareLink, WorkflowEvent, db
from services.core.actors import Actor
from services.core.errors import Conflict
from services.planning import approvals, board_moves
from services.results import results
from services.workflow import experiments, lifecycle
from tests.conftest import csrf_from

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
TWO_POD = (PLANS / "two_pod_seed_sweep.md").read_text()
RESULT = ('<section id="tldr"><h2>TL;DR</h2><ul><li>Motivation: m</li><li>What I ran: r</li>'
          '<li>Results: 0.91</li><li>Next steps: n</li></ul></section>'
          '<figure id="figure"><svg viewBox="0 0 10 10"></svg><figcaption>c</figcaption></figure>'
          '<details><summary>Design</summary><p>d</p></details>')


def _form(html: str, action: str) -> dict:
    """The hidden fields (csrf_token, form_key, expected …) of the form posting to `action`."""
    match = re.search(rf'<form[^>]*action="{re.escape(action)}"[^>]*>(.*?)</form>', html, re.S)
    assert match, f"no form posts to {action}"
    return dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', match.group(1)))


def _count(app, model, *where) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


def _twice(client, url: str, data: dict):
    """The same post twice, as a reload of the answer or a double tap sends it."""
    first = client.post(url, data=data)
    second = client.post(url, data=data)
    return first, second


def test_every_creating_form_on_the_experiment_page_carries_a_fresh_key(app, client, owner, make_experiment):
    """Do the plan, follow-up, answers, move and share forms each carry a form key, new on every render?"""
    number = make_experiment("Result", status="awaiting_promotion")
    with app.app_context():
        results.save_clean_result(experiments.get_experiment(number), RESULT, Actor("owner"), title="Result")
        db.session.commit()
    first, again = (client.get(f"/experiments/{number}").text for _ in range(2))
    for action in (f"/experiments/{number}/follow-ups", f"/experiments/{number}/status", "/settings/share-links",
                   f"/experiments/{number}/clean-result", f"/experiments/{number}/promote"):
        key = _form(first, action).get("form_key")
        assert key and len(key) >= 20, action
        assert _form(again, action)["form_key"] != key, action


def test_a_follow_up_posted_twice_is_created_once(app, client, owner, make_experiment):
    parent = make_experiment("Parent")
    data = {**_form(client.get(f"/experiments/{parent}").text, f"/experiments/{parent}/follow-ups"),
            "title": "Does it hold at 1B?", "hypothesis": "It does."}
    first, second = _twice(client, f"/experiments/{parent}/follow-ups", data)
    assert first.status_code == second.status_code == 303
    with app.app_context():
        parent_id = experiments.get_experiment(parent).id
    assert _count(app, Experiment, Experiment.parent_experiment_id == parent_id) == 1


def test_asking_claude_for_follow_ups_twice_starts_it_once(app, client, owner, make_experiment, fake_anthropic):
    """The "Ask Claude for follow-ups" move sent again after the proposer finished (the status is back
    at awaiting_promotion, so `expected` matches): does it start the proposer only once?"""
    number = make_experiment("Result", status="awaiting_promotion")
    page = client.get(f"/experiments/{number}").text
    follow_ups_form = re.search(r'<section class="panel[^"]*" id="follow-ups">.*?</section>', page, re.S).group(0)
    data = {**_form(follow_ups_form, f"/experiments/{number}/status"), "to": "followups_running"}
    assert client.post(f"/experiments/{number}/status", data=data).status_code == 303
    with app.app_context():
        experiment = experiments.get_experiment(number)
        lifecycle.transition(experiment, "awaiting_promotion", Actor.system(), note="Proposer finished.")
        db.session.commit()
        experiment_id = experiment.id
    assert client.post(f"/experiments/{number}/status", data=data).status_code == 303
    assert _count(app, WorkflowEvent, WorkflowEvent.entity_id == experiment_id,
                  WorkflowEvent.to_status == "followups_running") == 1
    assert _count(app, AgentRun, AgentRun.scope_id == experiment_id, AgentRun.agent == "follow-up-proposer") <= 1


def test_a_new_experiment_posted_twice_is_created_once(app, client, owner):
    data = {**_form(client.get("/experiments/new").text, "/experiments/new"), "title": "Only once", "kind": "experiment",
            "priority": "normal"}
    first, second = _twice(client, "/experiments/new", data)
    assert first.status_code == second.status_code == 303
    assert _count(app, Experiment, Experiment.title == "Only once") == 1


def test_a_pasted_plan_posted_twice_is_one_version(app, client, owner, make_experiment):
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    data = {**_form(client.get(f"/experiments/{number}").text, f"/experiments/{number}/plan"), "markdown": TWO_POD}
    first, second = _twice(client, f"/experiments/{number}/plan", data)
    assert "/approvals/" in first.headers["Location"] and second.status_code == 303
    assert _count(app, PlanVersion) == 1


def test_a_token_posted_twice_is_one_token_and_its_secret_is_shown_once(app, client, owner):
    data = {**_form(client.get("/api-tokens").text, "/api-tokens"), "name": "laptop", "scopes": ["read"]}
    first, second = _twice(client, "/api-tokens", data)
    assert first.status_code == second.status_code == 303
    assert _count(app, ApiToken) == 1
    shown = client.get("/api-tokens").text
    assert re.search(r'value="sk_[^"]+"', shown) and shown.count("only time") == 1
    assert not re.search(r'value="sk_[^"]+"', client.get("/api-tokens").text)  # a reload shows it no more


def test_a_share_link_posted_twice_is_one_link_shown_once(app, client, owner):
    page = client.get("/settings").text
    data = {**_form(page, "/settings/share-links"), "scope": "all_promoted", "label": "For Ada"}
    first, second = _twice(client, "/settings/share-links", data)
    assert first.status_code == second.status_code == 303 and first.headers["Location"].endswith("#share-links")
    assert _count(app, ShareLink) == 1
    assert 'id="new-share-url"' in client.get("/settings").text
    assert 'id="new-share-url"' not in client.get("/settings").text


def test_a_refused_post_frees_its_key(app, client, owner):
    """A refusal changes nothing, so the same form (same key) fixed and sent again must work."""
    key_fields = _form(client.get("/experiments/new").text, "/experiments/new")
    refused = client.post("/experiments/new", data={**key_fields, "title": ""})
    assert refused.status_code == 303 and refused.headers["Location"].endswith("/experiments/new")
    assert "Title is required." in client.get("/experiments/new").text
    fixed = client.post("/experiments/new", data={**key_fields, "title": "Second try"})
    assert fixed.status_code == 303 and "/experiments/" in fixed.headers["Location"]
    assert _count(app, Experiment, Experiment.title == "Second try") == 1


@pytest.mark.parametrize("key", ["x" * 65, "spaces are odd", "quote\"d", "<script>"])
def test_a_malformed_form_key_is_refused_and_nothing_happens(app, client, owner, key):
    response = client.post("/experiments/new", data={"csrf_token": owner.csrf(), "form_key": key,
                                                     "title": "Never", "kind": "experiment", "priority": "normal"})
    assert response.status_code == 400 and "form's key is malformed" in html.unescape(response.text)
    assert _count(app, Experiment, Experiment.title == "Never") == 0


def test_a_refused_move_redirects_and_a_reload_shows_the_page_as_it_is(app, client, owner, make_experiment):
    """A refused move (no JavaScript) answers a redirect; the page shows the refusal once, then not again."""
    number = make_experiment()
    data = {**_form(client.get(f"/experiments/{number}").text, f"/experiments/{number}/status"), "to": "running"}
    refused = client.post(f"/experiments/{number}/status", data=data)
    assert refused.status_code == 303 and refused.headers["Location"].endswith("#status")
    assert "cannot move from proposed to running" in client.get(refused.headers["Location"]).text
    assert "cannot move from proposed to running" not in client.get(refused.headers["Location"]).text


# --- approving needs a plan -----------------------------------------------------------------------

def test_a_planless_card_cannot_be_approved_from_the_board(app, client, owner, make_planless_pending):
    """Board → "Move to… approved" on a plan_pending card without a plan: refused with the reason,
    nothing moved, no orchestrator."""
    number = make_planless_pending()
    board = client.get("/board").text
    response = client.post(f"/board/move/{number}", data={"to": "approved", "expected": "plan_pending",
                                                          "csrf_token": csrf_from(board)})
    assert response.status_code == 303  # post/redirect/get: the refusal is on the board it leads to
    assert "has no plan waiting for approval" in client.get(response.headers["Location"]).text
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "plan_pending"
        assert _count(app, AgentRun, AgentRun.scope_id == experiment.id) == 0


@pytest.mark.parametrize("path", ["board", "status form", "transition"])
def test_every_path_to_approved_meets_the_guard(app, app_ctx, make_planless_pending, path):
    number = make_planless_pending()
    experiment = experiments.get_experiment(number)
    with pytest.raises(Conflict) as refused:
        if path == "board":
            board_moves.move(experiment, "running", Actor("owner"))
        elif path == "status form":
            lifecycle.transition(experiment, "approved", Actor("owner"), expected_status="plan_pending")
        else:
            lifecycle.transition(experiment, "approved", Actor.system(),
                                 metadata={"approval_request_id": "00000000-0000-4000-8000-000000000000"})
    assert refused.value.code == "no_plan_to_approve"
    db.session.rollback()
    assert experiments.get_experiment(number).status == "plan_pending"


def test_a_plan_with_its_request_is_approved_from_the_board(app, app_ctx, make_experiment):
    """The guard lets the real thing through: a pending request with a plan, moved on the board."""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    experiment = experiments.get_experiment(number)
    approvals.submit_plan(experiment, TWO_POD, Actor("agent", "run", "planner"), source="agent")
    db.session.commit()
    board_moves.move(experiment, "approved", Actor("owner"))
    db.session.commit()
    assert experiments.get_experiment(number).status in ("approved", "implementing")


def test_the_demo_has_no_approval_card_without_a_plan(app, app_ctx):
    """Does every curated experiment at plan_pending have a pending request with a plan?"""
    from models import ApprovalRequest
    from services.pipeline import demo
    demo.load_curated()
    pending = list(db.session.scalars(sa.select(Experiment).where(
        Experiment.status.in_(("plan_pending", "awaiting_approval")))))
    assert pending
    for experiment in pending:
        request = db.session.scalar(sa.select(ApprovalRequest).where(
            ApprovalRequest.experiment_id == experiment.id, ApprovalRequest.status == "pending"))
        assert request is not None and request.plan_version_id is not None, experiment.title
