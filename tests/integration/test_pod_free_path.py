"""The pod-free path for surveys and infra tasks (SPEC §2.2): approval →
implementing → clean_result_drafting → awaiting_promotion with no dispatch, against the
faithful fake model through the real loop, worker and tools; and the transition table
that knows which kinds dispatch."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, Pod, RunEvent, WorkflowEvent, db
from services.core.actors import Actor
from services.core.errors import Conflict
from services.planning import approvals
from services.workflow import experiments, lifecycle
from tests.fakes.anthropic_server import reply, text, tool_use

SURVEY_PLAN = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "survey_no_pods.md").read_text()
OWNER = Actor("owner", None, "owner")
AGENT = Actor("agent", None, "experiment-orchestrator")
RESULT_HTML = ("<section><h2>TL;DR</h2><ul><li>Motivation: which schedules are used.</li><li>What I ran: a "
               "survey of 15 papers.</li><li>Results: 11 of 15 use a cubic schedule (see the table).</li>"
               "<li>Next steps: test cubic against linear.</li></ul></section><figure id=\"figure\"><table>"
               "<tr><th>Schedule</th><th>Papers</th></tr><tr><td>cubic</td><td>11</td></tr></table></figure>"
               "<details><summary>Experimental design</summary><p>Fifteen papers, 2024–2026.</p></details>")


def _tool_results(run_id) -> list[str]:
    return list(db.session.scalars(sa.select(RunEvent.body).where(
        RunEvent.run_id == run_id, RunEvent.event_type == "tool_result").order_by(RunEvent.seq)))


def test_survey_reaches_awaiting_promotion_without_pods(app, fake_anthropic, worker, make_experiment):
    """Approving a survey's plan (no runpod-spec, and not a blocker) starts the orchestrator; it
    refuses to launch pods, moves to clean_result_drafting, the analyzer writes the result, and
    the experiment waits for promotion — no pod, no dispatch run."""
    number = make_experiment("Sparsity schedules in pruning papers", kind="survey", status="planning")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, SURVEY_PLAN, Actor("agent", None, "experiment-planner"),
                                           source="agent")
        assert submission.valid and not submission.plan_version.plan_json["is_blocker"]
        db.session.commit()
        assert experiment.status == "plan_pending"
        approval = db.session.scalar(sa.select(ApprovalRequest))
        fake_anthropic.script(
            # the orchestrator
            reply(tool_use("get_experiment", {})),
            reply(tool_use("launch_pods", {})),
            reply(tool_use("set_status", {"status": "clean_result_drafting",
                                          "note": "Survey: no pods; the write-up is the result."})),
            reply(tool_use("spawn_agent", {"agent": "analyzer", "request": "Write the survey's clean result."})),
            # the analyzer (its own conversation)
            reply(tool_use("write_clean_result", {"html": RESULT_HTML,
                                                  "title": "Most pruning papers use a cubic schedule "
                                                           "(MODERATE confidence)"})),
            reply(tool_use("post_marker", {"marker": "epm:clean-result", "note": "Draft written."})),
            reply(text("The clean result is written.")),
            # the orchestrator, woken
            reply(tool_use("set_status", {"status": "awaiting_promotion", "note": "Ready for the owner."})),
            reply(text("The survey waits for promotion.")))
        effects = approvals.approve(approval, OWNER, confirm_unchecked=True)
        db.session.commit()
        lifecycle.run_side_effects(effects)
        assert experiments.get_experiment(number).status == "implementing"
    worker()
    with app.app_context():
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        assert experiment.status == "awaiting_promotion" and experiment.has_clean_result
        assert db.session.scalar(sa.select(sa.func.count(Pod.id))) == 0
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "experiment")) == 0
        orchestrator = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-orchestrator"))
        assert orchestrator.status == "completed"
        results = _tool_results(orchestrator.id)
        assert results[1].startswith("pod_free:") and "survey" in results[1]
        path = list(db.session.scalars(sa.select(WorkflowEvent.to_status).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at)))
        assert path[-4:] == ["approved", "implementing", "clean_result_drafting", "awaiting_promotion"]
    # The orchestrator was told about the pod-free path in its prompt.
    assert "Surveys and infra tasks" in str(fake_anthropic.requests[0].body["system"])


@pytest.mark.parametrize("kind", ["survey", "infra"])
def test_pod_free_kinds_skip_dispatch_in_the_table(app_ctx, kind):
    """May an agent move a survey/infra task from implementing or testing to clean_result_drafting,
    and is the dispatch move (→ queued) not theirs?"""
    experiment = experiments.create_experiment({"title": f"A {kind}", "kind": kind}, OWNER)
    db.session.execute(sa.update(type(experiment)).where(type(experiment).id == experiment.id)
                       .values(status="testing"))
    db.session.refresh(experiment)
    agent_moves = {m.to for m in lifecycle.allowed_moves(experiment, "agent")}
    assert "clean_result_drafting" in agent_moves
    assert "queued" not in {m.to for m in lifecycle.allowed_moves(experiment, "system")}
    lifecycle.transition(experiment, "clean_result_drafting", AGENT, note="Write-up next.")
    assert experiment.status == "clean_result_drafting"


def test_an_ordinary_experiment_cannot_skip_its_pods(app_ctx):
    """Is the shortcut refused for kind=experiment, with the allowed moves named, and nothing changed?"""
    experiment = experiments.create_experiment({"title": "A GPU run", "kind": "experiment"}, OWNER)
    db.session.execute(sa.update(type(experiment)).where(type(experiment).id == experiment.id)
                       .values(status="implementing"))
    db.session.refresh(experiment)
    with pytest.raises(Conflict) as caught:
        lifecycle.transition(experiment, "clean_result_drafting", AGENT, note="skip")
    assert "cannot move from implementing to clean result drafting as agent" in caught.value.message
    db.session.refresh(experiment)
    assert experiment.status == "implementing"
    assert "queued" in {m.to for m in lifecycle.allowed_moves(experiment, "system")}


def test_board_cards_say_a_survey_runs_no_pods(client, owner, make_experiment):
    """Does the board mark survey and infra cards as pod-free, and not an ordinary experiment's?"""
    survey = make_experiment("Tokenizer survey", kind="survey", status="implementing")
    ordinary = make_experiment("GPU sweep", kind="experiment", status="implementing")
    body = client.get("/board").text
    card = body.split(f'id="card-{survey}"', 1)[1].split("</article>", 1)[0]
    assert "survey · no pods" in card
    other = body.split(f'id="card-{ordinary}"', 1)[1].split("</article>", 1)[0]
    assert "no pods" not in other
