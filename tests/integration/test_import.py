"""`flask --app app import old-sagan`: numbers kept, events mapped, idempotent, bad files refused."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import sqlalchemy as sa

from models import ApprovalRequest, Experiment, PlanVersion, WorkflowEvent, db
from models.research import Belief, RecordLink
from services.core.actors import Actor
from services.research import beliefs
from services.workflow import experiments

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "old-sagan" / "experiment-812.json"


def _counts(app):
    with app.app_context():
        return tuple(db.session.scalar(sa.select(sa.func.count()).select_from(m))
                     for m in (Experiment, WorkflowEvent, ApprovalRequest, PlanVersion))


def test_import_keeps_number_status_and_maps_oddities(app, runner):
    """Is #812 imported as awaiting_approval with its events mapped and secrets redacted?"""
    result = runner.invoke(args=["import", "old-sagan", str(FIXTURE)])
    assert result.exit_code == 0, result.output
    assert "1 experiment(s) created" in result.output
    with app.app_context():
        experiment = experiments.get_experiment(812)
        assert experiment.status == "awaiting_approval"
        assert experiment.turn == "Owner turn: approve, defer, or reject"
        assert experiment.pod_account == "personal" and experiment.tags == ["probes", "seeds"]
        assert experiment.pod_spec["gpuType"] == "A100-SXM"
        by_note = {e.note: e for e in db.session.scalars(sa.select(WorkflowEvent))}
        recovery = by_note["Automatic recovery queued after agent run 0a1b2c3d failed."]
        assert recovery.event_type == "note"  # state_changed without a toStatus
        progress = next(e for n, e in by_note.items() if n.startswith("40%"))
        assert progress.event_type == "progress" and "sk_live" not in progress.note
        assert by_note["Cascaded from agent_run 0a1b2c3d failed"].event_type == "blocked"
        assert db.session.scalar(sa.select(PlanVersion.source)) == "import"
        approval = db.session.scalar(sa.select(ApprovalRequest))
        assert approval.status == "pending" and approval.requested_state == "awaiting_approval"


def test_import_twice_changes_nothing(app, runner):
    """Is a second import of the same document a no-op?"""
    runner.invoke(args=["import", "old-sagan", str(FIXTURE)])
    before = _counts(app)
    result = runner.invoke(args=["import", "old-sagan", str(FIXTURE)])
    assert result.exit_code == 0 and "1 already present" in result.output
    assert _counts(app) == before


def test_numbers_continue_after_imported(app, runner):
    """Does the next new experiment get #813 after importing #812?"""
    runner.invoke(args=["import", "old-sagan", str(FIXTURE)])
    with app.app_context():
        created = experiments.create_experiment({"title": "after import"}, Actor("owner"))
        db.session.commit()
        assert created.number == 813


def test_bad_documents_are_refused_and_import_nothing(app, runner, tmp_path):
    """Do broken files get a clear error and leave the database unchanged?"""
    doc = json.loads(FIXTURE.read_text())
    cases = {
        "not-json.json": "{broken",
        "no-experiment.json": json.dumps({"events": []}),
        "bad-status.json": json.dumps({**doc, "experiment": {**doc["experiment"], "status": "exploding"}}),
        "bad-number.json": json.dumps({**doc, "experiment": {**doc["experiment"], "number": "abc"}}),
        "bad-event-id.json": json.dumps({**doc, "events": [{**doc["events"][0], "id": "nope"}]}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = runner.invoke(args=["import", "old-sagan", str(path)])
        assert result.exit_code != 0, name
        assert "nothing imported" in result.output, (name, result.output)
        assert _counts(app) == (0, 0, 0, 0), name


def test_number_clash_with_other_experiment_is_refused(app, runner, make_experiment):
    """Is an import refused when its number belongs to a different experiment here?"""
    with app.app_context():
        app.config["SAGAN_FIRST_EXPERIMENT_NUMBER"] = 812
        try:
            make_experiment("local #812")
        finally:
            app.config["SAGAN_FIRST_EXPERIMENT_NUMBER"] = 1
    result = runner.invoke(args=["import", "old-sagan", str(FIXTURE)])
    assert result.exit_code != 0 and "already exists here" in result.output


def test_imported_html_is_rebuilt_and_sanitized_on_the_way_in(app, runner, tmp_path):
    """The old system's planJson (with ready-made *_html) is not trusted: the plan is parsed again
    from its markdown, an imported clean result goes through the result sanitizer, and secrets in
    the pod spec and the config are redacted."""
    doc = json.loads(FIXTURE.read_text())
    doc["experiment"]["planJson"] = {"sections": [{"title": "Goal", "body_md": "x",
                                                   "body_html": '<b onclick="steal()">hostile</b>'}]}
    doc["experiment"]["body"] = '<p>Result</p><script>alert(1)</script><a href="javascript:x()">link</a>'
    doc["experiment"]["podSpec"]["env"] = {"HF_TOKEN": "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
    doc["experiment"]["configYaml"] = "wandb_api_key: 0123456789abcdef0123\n"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(args=["import", "old-sagan", str(path)])
    assert result.exit_code == 0, result.output
    with app.app_context():
        experiment = experiments.get_experiment(812)
        stored = json.dumps(experiment.plan_json) + json.dumps(
            db.session.scalar(sa.select(PlanVersion.plan_json)))
        assert "onclick" not in stored and "hostile" not in stored
        assert [s["title"] for s in experiment.plan_json["sections"]] == ["Goal", "Hypothesis", "Approval Checklist"]
        assert experiment.plan_json["sections"][0]["body_html"] == "<p>Measure seed variance.</p>"
        assert experiment.plan_json["checklist"][0]["label"] == "budget ok"
        assert "<p>Result</p>" in experiment.body
        assert "<script" not in experiment.body and "javascript:" not in experiment.body
        assert "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ" not in json.dumps(experiment.pod_spec)
        assert "0123456789abcdef0123" not in experiment.config_yaml


def test_a_belief_the_old_experiment_tests_is_linked_when_it_is_here(app, runner, tmp_path):
    """Does an imported experiment whose `beliefId` names a belief here get one `tests` link to it
    (not a second on re-import), and one naming a belief that is not here come in unlinked, the
    report saying so — for an unknown id and for one that is not an id at all?"""
    with app.app_context():
        belief = beliefs.create_belief({"title": "Seeds matter", "status": "active"}, Actor("owner", None, "Owner"))
        db.session.commit()
        belief_id = belief.id
    doc = json.loads(FIXTURE.read_text())
    doc["experiment"]["beliefId"] = str(belief_id)
    linked = tmp_path / "linked.json"
    linked.write_text(json.dumps(doc))
    for _ in range(2):
        result = runner.invoke(args=["import", "old-sagan", str(linked)])
        assert result.exit_code == 0, result.output
    with app.app_context():
        [link] = db.session.scalars(sa.select(RecordLink)).all()
        experiment = experiments.get_experiment(812)
        assert (link.source_kind, link.source_id, link.kind, link.target_kind, link.target_id) == (
            "experiment", experiment.id, "tests", "belief", belief_id)
        assert link.actor_kind == "system"
    for number, old_belief in ((813, str(uuid.uuid4())), (814, "B3")):
        other = json.loads(FIXTURE.read_text())
        other["experiment"].update(id=str(uuid.uuid4()), number=str(number), beliefId=old_belief)
        for event in other["events"]:
            event["id"] = str(uuid.uuid4())
        other["approvalRequests"] = []
        path = tmp_path / f"{number}.json"
        path.write_text(json.dumps(other))
        result = runner.invoke(args=["import", "old-sagan", str(path)])
        assert result.exit_code == 0, result.output
        assert f"#{number}: the old belief {old_belief} is not here; imported without linking it." in result.output
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(RecordLink)) == 1
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Belief)) == 1
