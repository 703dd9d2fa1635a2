"""Experiments: list, create, read (with a page of events and the approval requests), patch."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, id_text, int_arg
from blueprints.api.approvals import approval_json
from blueprints.api.workflow import event_page
from models import Experiment
from services.planning import approvals
from services.workflow import experiments

routes = Routes()

# What POST accepts: the editable fields, plus the owner-only ones so a token is told 403
# (not "unknown") and the owner is told which of them a create does not take.
CREATE_FIELDS = frozenset(experiments.EDITABLE_FIELDS) | experiments.OWNER_ONLY_FIELDS


def experiment_json(e: Experiment) -> dict:
    return {
        "id": str(e.id), "number": e.number, "title": e.title, "status": e.status, "turn": e.turn,
        "kind": e.kind, "priority": e.priority, "tags": e.tags, "hypothesis": e.hypothesis,
        "computeSize": e.compute_size, "assigneeKind": e.assignee_kind,
        "hasCleanResult": e.has_clean_result, "autoApprovePlan": e.auto_approve_plan,
        "parentExperimentId": id_text(e.parent_experiment_id),
        "podAccount": e.pod_account, "costCapUsd": e.cost_cap_usd,
        "runpodAccount": e.pod_account,  # the old name, deprecated: clients read podAccount
        "gitBranch": e.git_branch, "gitCommit": e.git_commit, "projectId": id_text(e.project_id),
        "statusBeforeBlock": e.status_before_block, "planMd": e.plan_md, "planJson": e.plan_json,
        "podSpec": e.pod_spec, "body": e.body,
        "createdAt": e.created_at.isoformat(), "updatedAt": e.updated_at.isoformat(),
    }


def experiment_summary(e: Experiment) -> dict:
    """The few fields a state change answers with."""
    return {"id": str(e.id), "number": e.number, "title": e.title, "status": e.status, "turn": e.turn}


def _experiment_view(experiment: Experiment) -> dict:
    page = event_page(experiment, 50)
    return {"experiment": experiment_json(experiment), **page,
            "approvalRequests": [approval_json(a) for a in approvals.requests_of(experiment)]}


@routes.get("/experiments")
@access.api("read")
def list_experiments():
    """Experiments, newest first; `status` and `project` (a slug) filter, `limit` 1–200 (default 100)."""
    found = experiments.newest(int_arg("limit", 100, 1, 200), request.args.get("status") or None,
                               request.args.get("project") or None)
    return {"experiments": [experiment_json(e) for e in found]}


@routes.post("/experiments")
@access.api("write")
def create_experiment():
    """Create an experiment (`title` required); answers 201 with the record."""
    experiment = experiments.create_experiment(body_fields(CREATE_FIELDS), access.actor())
    commit_then_run()
    return {"experiment": experiment_json(experiment)}, 201


@routes.get("/experiments/<ref>")
@access.api("read")
def get_experiment(ref: str):
    """One experiment by uuid or number, with a page of events and its approval requests."""
    return _experiment_view(experiments.get_experiment(ref))


@routes.get("/experiments/by-number/<int:number>")
@access.api("read")
def get_experiment_by_number(number: int):
    """One experiment by number (the old client's path)."""
    return _experiment_view(experiments.get_experiment(number))


@routes.patch("/experiments/<ref>")
@access.api("write")
def patch_experiment(ref: str):
    """Patch fields; `status` (+ `note`) goes through transition() (services.workflow.experiments.patch)."""
    experiment = experiments.get_experiment(ref)
    effects = experiments.patch(experiment, body_fields(experiments.PATCHABLE), access.actor())
    commit_then_run(effects)
    return {"experiment": experiment_summary(experiment), "ok": True}
