"""The plan on the experiment page: paste a plan, versions, approved marker, spec diff, questions."""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from models import Experiment, PlanVersion, db
from services.core.actors import Actor
from services.planning import approvals, questions
from services.workflow import experiments

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
TWO_POD = (PLANS / "two_pod_seed_sweep.md").read_text()


def test_paste_plan_redirects_to_its_approval(app, client, owner, make_experiment):
    """Does pasting a valid plan on the page open an approval request and go there?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    response = client.post(f"/experiments/{number}/plan", data={"markdown": TWO_POD, "csrf_token": owner.csrf()})
    assert response.status_code == 303 and "/approvals/" in response.headers["Location"]
    page = client.get(f"/experiments/{number}").text
    assert "Review plan v1 for approval" in page and "<summary>Goal</summary>" in page


def test_paste_bad_plans_show_why_and_keep_text(app, client, owner, make_experiment):
    """Do a questions-only text and an invalid spec each say why, keeping the text in the box?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    short = client.post(f"/experiments/{number}/plan", data={
        "markdown": (PLANS / "questions_only.md").read_text(), "csrf_token": owner.csrf()}, follow_redirects=True)
    assert "reads as questions, not a plan" in short.text and "Which base model?" in short.text
    bad = client.post(f"/experiments/{number}/plan", data={
        "markdown": TWO_POD.replace('"A100-SXM"', '"B300"'), "csrf_token": owner.csrf()}, follow_redirects=True)
    assert "runpod-spec is invalid, so no approval was requested" in bad.text
    assert 'unknown GPU &#34;B300&#34;' in bad.text or "unknown GPU &quot;B300&quot;" in bad.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(PlanVersion.id))) == 1


def test_approved_version_marked_and_spec_diff_shown(app, client, owner, make_experiment):
    """Is the approved version marked, and a later change to the stored spec shown as a diff?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, TWO_POD, Actor("owner"), source="owner")
        approvals.approve(submission.approval, Actor("owner"), confirm_unchecked=True)
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    assert "approved</span>" in page and "differs from the approved plan" not in page
    with app.app_context():
        experiment = experiments.get_experiment(number)
        spec = [dict(pod) for pod in experiment.pod_spec]
        spec[0]["gpuCount"] = 8
        db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(pod_spec=spec))
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    assert "The stored pod spec differs from the approved plan." in page
    assert '+    &#34;gpuCount&#34;: 8' in page


def test_questions_are_answered_on_the_page(app, client, owner, make_experiment):
    """Does the page show each question with an answer box and send answers back to the planner?"""
    number = make_experiment("Vague", status="clarifying")
    with app.app_context():
        questions.ask(experiments.get_experiment(number),
                      [{"key": "base-model", "text": "Which base model?"}], Actor("agent", "run", "planner"))
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    assert "Which base model?" in page and 'name="answer-base-model"' in page
    empty = client.post(f"/experiments/{number}/answers", data={"answer-base-model": " ", "csrf_token": owner.csrf()},
                        follow_redirects=True)
    assert "Answer at least one question." in empty.text
    done = client.post(f"/experiments/{number}/answers",
                       data={"answer-base-model": "Qwen 7B", "expected": "awaiting_clarifications",
                             "csrf_token": owner.csrf()})
    assert done.status_code == 303
    with app.app_context():
        assert experiments.get_experiment(number).status == "clarifying"


def test_experiment_references_in_a_plan_link_to_those_experiments(app, client, owner, make_experiment):
    """Does `#<number>` in a plan's sections show as a link to that experiment on the page?"""
    earlier = make_experiment("Earlier sweep")
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    plan = TWO_POD.replace("## Hypothesis\n", f"## Hypothesis\nAs #{earlier} found, seeds matter.\n", 1)
    assert plan != TWO_POD
    client.post(f"/experiments/{number}/plan", data={"markdown": plan, "csrf_token": owner.csrf()})
    page = client.get(f"/experiments/{number}").text
    assert f'As <a href="/experiments/{earlier}" class="experiment-ref" rel="noopener noreferrer nofollow">' \
           f'#{earlier}</a> found' in page
