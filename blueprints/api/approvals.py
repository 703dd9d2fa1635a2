"""Plans, clarifying questions and approval requests (SPEC §4)."""
from __future__ import annotations

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, iso
from models import ApprovalRequest, PlanVersion
from services.core.errors import ValidationError
from services.planning import approvals, questions
from services.workflow import experiments

routes = Routes()

RESOLVE_FIELDS = ("decision", "answers", "note", "confirm_unchecked")


def approval_json(a: ApprovalRequest) -> dict:
    return {
        "id": str(a.id), "experimentId": str(a.experiment_id), "kind": a.kind, "title": a.title,
        "status": a.status, "requestedState": a.requested_state, "approvedState": a.approved_state,
        "rejectedState": a.rejected_state, "checklist": a.checklist, "answers": a.answers,
        "estimatedCostUsd": a.estimated_cost_usd, "resolvedAt": iso(a.resolved_at),
        "resolvedNote": a.resolved_note, "createdAt": a.created_at.isoformat(),
    }


def plan_version_json(pv: PlanVersion) -> dict:
    return {"id": str(pv.id), "experimentId": str(pv.experiment_id), "version": pv.version,
            "source": pv.source, "problems": pv.problems or [], "estimate": pv.estimate,
            "createdAt": iso(pv.created_at)}


@routes.post("/experiments/<ref>/plans")
@access.api("write")
def submit_plan(ref: str):
    """Submit plan markdown: the version, parsed plan, problems, estimate and approval request."""
    experiment = experiments.get_experiment(ref)
    data = body_fields(("markdown",))
    if not isinstance(data.get("markdown"), str):
        raise ValidationError("markdown (the plan text) is required.", field="markdown")
    actor = access.actor()
    source = "owner" if actor.kind == "owner" else "api"
    submission = approvals.submit_plan(experiment, data["markdown"], actor, source=source)
    commit_then_run(submission.effects)
    body = {"planVersion": plan_version_json(submission.plan_version),
            "approvalRequest": approval_json(submission.approval) if submission.approval else None,
            "plan": submission.plan_version.plan_json, "problems": submission.problems,
            "estimate": submission.estimate, "autoApproved": submission.auto_approved}
    if not submission.valid:
        # The version is kept (committed above) so the planner or the owner can fix it.
        return {"error": "invalid_spec", "message": "The plan's runpod-spec is invalid; "
                "it was stored as v%d without an approval request." % submission.plan_version.version,
                **body}, 422
    return body, 201


@routes.post("/experiments/<ref>/questions")
@access.api("write")
def ask_questions(ref: str):
    """Post clarifying questions; the experiment waits for the owner's answers."""
    experiment = experiments.get_experiment(ref)
    data = body_fields(("questions",))
    effects = questions.ask(experiment, data.get("questions"), access.actor())
    commit_then_run(effects)
    return {"ok": True, "experiment": {"number": experiment.number, "status": experiment.status}}, 201


@routes.post("/approvals/<request_id>/resolve")
@access.owner_api
def resolve_approval(request_id: str):
    """Approve, reject or defer with answers (the owner's session only)."""
    data = body_fields(RESOLVE_FIELDS)
    approval = approvals.get_request(request_id)
    effects = approvals.resolve(approval, data.get("decision"), access.actor(), answers=data.get("answers"),
                                note=data.get("note"), confirm_unchecked=bool(data.get("confirm_unchecked")))
    commit_then_run(effects)
    experiment = experiments.get_experiment(approval.experiment_id)
    return {"ok": True, "approvalRequest": approval_json(approval),
            "experiment": {"number": experiment.number, "status": experiment.status,
                           "turn": experiment.turn}}
