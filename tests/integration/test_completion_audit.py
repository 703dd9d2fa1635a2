"""The completion audit (services/results/completion_audit.py) before awaiting_promotion: an orchestrator
whose clean result quotes a number no artifact holds is kept in Sagan's turn with the
finding, then handed to the owner; a result whose numbers round from the artifacts and the
analysis output passes; failed pods must be explained; an API client gets the findings as a
409. Real PostgreSQL and Redis, the orchestrator run by a real RQ worker against the fake
Messages API; the verdicts are checked on the timeline, the run and the experiment page."""
from __future__ import annotations

import json
import uuid

import sqlalchemy as sa

from models import Pod, RunEvent, WorkflowEvent, db
from services.core.actors import Actor
from services.dispatch import progress
from services.results import completion_audit, results
from services.workflow import experiments, jobs, runs
from tests.fakes.anthropic_server import reply, text, tool_use

AGENT = Actor("agent", None, "analyzer")


def result_html(results_line: str, *, design: str = "The probe on one pod.") -> str:
    """A clean result with its four TL;DR bullets and a primary figure."""
    return f"""<section id="tldr"><h2>TL;DR</h2><ul>
<li><strong>Motivation:</strong> How much does the seed move the probe?</li>
<li><strong>What I ran:</strong> one pod for 20 minutes, as planned.</li>
<li><strong>Results:</strong> {results_line} (<a href="#figure">figure</a>).</li>
<li><strong>Next steps:</strong> run 10 seeds before trusting 1 number.</li></ul></section>
<figure id="figure"><svg viewBox="0 0 10 10"><rect class="bar" width="5" height="5"><title>seed 0</title></rect></svg>
</figure><details><summary>Experimental design</summary><p>{design}</p></details>"""


def finished(app, make_experiment, results_line: str, *, exit_code: int | None = 0, design: str = "The probe.",
             title: str = "Seed spread") -> int:
    """An experiment at clean_result_drafting whose one planned pod (the demo plan's
    `demo-seeds`) ended with `exit_code` and uploaded metrics.json, an analysis that printed
    its statistics, and a clean result saying `results_line`."""
    number = make_experiment(title, status="clean_result_drafting")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        dispatch = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                                   status="completed")
        pod = Pod(id=uuid.uuid4(), agent_run_id=dispatch.id, experiment_id=experiment.id, account="local",
                  name=f"sagan-{number}-x-0-1", status="exited", exit_code=exit_code, run_index=0)
        db.session.add(pod)
        db.session.flush()
        progress.store_artifact(pod, "metrics.json", json.dumps({"seed": 0, "accuracy": 0.9312}).encode(), None)
        analyzer = runs.create_run(kind="apply", agent="analyzer", request="a", scope_id=experiment.id,
                                   status="completed")
        runs.append_event(analyzer.id, "tool_result", "accuracy std 0.0214 over seeds; a spread of 2.0 points",
                          {"tool": "run_analysis", "is_error": False})
        results.save_clean_result(experiment, result_html(results_line, design=design), AGENT,
                                  title=f"{title} (LOW confidence)")
        db.session.commit()
    return number


def _orchestrate(app, number, fake_anthropic, worker, *turns):
    with app.app_context():
        run = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Finish.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        run_id = run.id
        jobs.enqueue_run(run_id)
    fake_anthropic.script(*turns)
    worker()
    return run_id


def _audits(number) -> list[WorkflowEvent]:
    experiment = experiments.get_experiment(number)
    return list(db.session.scalars(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker == "epm:completion-audit")
        .order_by(WorkflowEvent.created_at)))


def _tool_results(run_id) -> list[RunEvent]:
    return list(db.session.scalars(sa.select(RunEvent).where(RunEvent.run_id == run_id,
                                                             RunEvent.event_type == "tool_result").order_by(RunEvent.seq)))


def test_a_tldr_number_in_no_artifact_keeps_the_result_in_sagans_turn_then_goes_to_the_owner(
        app, client, owner, fake_anthropic, worker, make_experiment):
    """0.97 is in no artifact and no analysis output: the orchestrator's set_status is answered
    with the finding and the experiment stays in clean_result_drafting; asked again, the
    audit fails a second time and the owner gets it (blocked, the finding in the note). Both
    verdicts are on the timeline and on the run tree."""
    number = finished(app, make_experiment, "accuracy 0.97 on the held-out seed")
    ask = tool_use("set_status", {"status": "awaiting_promotion", "note": "Ready."})
    run_id = _orchestrate(app, number, fake_anthropic, worker,
                          reply(text("Asking for promotion."), ask),
                          reply(tool_use("set_status", {"status": "awaiting_promotion", "note": "Again."})),
                          reply(text("Handed to the owner.")))
    with app.app_context():
        first, second = (e.body for e in _tool_results(run_id))
        assert first.startswith("The completion audit failed (round 1 of 2); the experiment stays in "
                                "clean_result_drafting")
        assert "0.97 (Results)" in first and "in no artifact or analysis output" in first
        assert "handed to the owner" in second
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.entity_id == experiment.id,
                                                                     WorkflowEvent.to_status == "blocked"))
        assert note.startswith("The completion audit failed 2 times in a row, so the owner decides") and "0.97" in note
        audits = _audits(number)
        assert [a.metadata_["verdict"] for a in audits] == ["fail", "fail"] and audits[1].metadata_["round"] == 2
        numbers = next(c for c in audits[0].metadata_["checks"] if c["name"] == "numbers")
        assert numbers["ok"] is False and numbers["details"]["missing"] == ["0.97 (Results)"]
        assert len(db.session.scalars(sa.select(RunEvent).where(
            RunEvent.run_id == run_id, RunEvent.event_type == "completion_audit")).all()) == 2
    page = client.get(f"/experiments/{number}").text
    assert "completion audit failed" in page and "Completion audit" in page


def test_numbers_that_round_from_the_artifacts_and_the_analysis_pass(app, client, owner, fake_anthropic, worker,
                                                                    make_experiment):
    """0.93 rounds from the artifact's 0.9312, ± 0.02 from the analysis's 0.0214, 2.0 points is
    what the analysis printed, and 20 minutes is the plan's: the audit passes and the
    orchestrator's marker moves the result to awaiting_promotion."""
    number = finished(app, make_experiment, "accuracy 0.93 ± 0.02 across seeds, a spread of 2.0 points")
    run_id = _orchestrate(app, number, fake_anthropic, worker,
                          reply(tool_use("post_marker", {"marker": "epm:awaiting-promotion", "note": "Ready.",
                                                         "next_status": "awaiting_promotion"})),
                          reply(text("Waiting for the owner.")))
    with app.app_context():
        assert experiments.get_experiment(number).status == "awaiting_promotion"
        (audit,) = _audits(number)
        assert audit.metadata_["verdict"] == "pass", audit.note
        assert audit.note.startswith("Completion audit passed (4 checks)")
        assert "all 4 TL;DR number(s) are in the artifacts or analysis outputs" in audit.note
        assert _tool_results(run_id)[0].body == "epm:awaiting-promotion recorded."
    assert "completion audit passed" in client.get(f"/experiments/{number}").text


def test_a_pod_that_did_not_exit_0_must_be_explained(app, make_experiment):
    """The planned pod exited 1: the audit fails until the result names it and says what happened."""
    number = finished(app, make_experiment, "accuracy 0.93", exit_code=1)
    with app.app_context():
        report = completion_audit.audit(experiments.get_experiment(number))
        pods = next(c for c in report.checks if c.name == "pods")
        assert not pods.ok and "demo-seeds exited 1" in pods.message
    explained = finished(app, make_experiment, "accuracy 0.93", exit_code=1, title="Explained",
                         design="The demo-seeds pod exited 1 after writing its metrics; the numbers are from them.")
    with app.app_context():
        report = completion_audit.audit(experiments.get_experiment(explained))
        assert report.passed, report.summary()
        assert "the result explains the others (demo-seeds exited 1)" in report.summary()


def test_an_api_client_asking_for_promotion_gets_the_findings(app, api_client, make_experiment):
    """A token acting as an agent: a failing audit is a 409 with the checks and nothing changes;
    once the result quotes what the evidence holds, the move is made and the pass recorded."""
    number = finished(app, make_experiment, "accuracy 0.97")
    client = api_client("read,write")
    refused = client.post(f"/api/experiments/{number}/workflow-events", json={"to_status": "awaiting_promotion"})
    assert refused.status_code == 409
    body = refused.get_json()
    assert body["error"] == "completion_audit_failed" and "0.97 (Results)" in body["message"]
    assert {c["name"]: c["ok"] for c in body["checks"]}["numbers"] is False
    with app.app_context():
        assert experiments.get_experiment(number).status == "clean_result_drafting" and _audits(number) == []
        results.save_clean_result(experiments.get_experiment(number), result_html("accuracy 0.93"), AGENT)
        db.session.commit()
    ok = client.post(f"/api/experiments/{number}/workflow-events",
                     json={"marker": "epm:awaiting-promotion", "next_status": "awaiting_promotion"})
    assert ok.status_code == 201, ok.get_json()
    with app.app_context():
        assert experiments.get_experiment(number).status == "awaiting_promotion"
        assert [a.metadata_["verdict"] for a in _audits(number)] == ["pass"]
