"""The JSON API (SPEC §9.2): experiments, workflow events, markers and registries.

Auth per route (blueprints.access): a bearer token with the listed scope, or the owner's
session (with CSRF). The actor is always the credential's. Errors are
`{"error": code, "message": sentence}` with the status codes of SPEC §9.2.
"""
from __future__ import annotations


import sqlalchemy as sa
from flask import Blueprint, request

from blueprints import access
from blueprints.pods import artifact_download
from models import ApprovalRequest, Artifact, Experiment, Pod, db
from services import (approvals, events, experiments, input_shape, lifecycle, markers, questions, registry, results,
                      runs, spend)
from services.dispatch import provisioner, watcher
from services.errors import ValidationError
from services.records import get_by_id

bp = Blueprint("api", __name__, url_prefix="/api")

# Fields that only the owner's session may change (SPEC §9.2): no token can.


def json_body() -> dict:
    """The request's JSON object, or a clear 400."""
    if not request.data:
        raise ValidationError("Send a JSON object body (Content-Type: application/json).", code="invalid_json")
    data = input_shape.parse_json(request.get_data())
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object.", code="invalid_json")
    return data


def experiment_json(e: Experiment) -> dict:
    return {
        "id": str(e.id), "number": e.number, "title": e.title, "status": e.status, "turn": e.turn,
        "kind": e.kind, "priority": e.priority, "tags": e.tags, "hypothesis": e.hypothesis,
        "computeSize": e.compute_size, "assigneeKind": e.assignee_kind,
        "hasCleanResult": e.has_clean_result, "autoApprovePlan": e.auto_approve_plan,
        "parentExperimentId": str(e.parent_experiment_id) if e.parent_experiment_id else None,
        "runpodAccount": e.runpod_account, "costCapUsd": e.cost_cap_usd,
        "gitBranch": e.git_branch, "gitCommit": e.git_commit,
        "statusBeforeBlock": e.status_before_block, "planMd": e.plan_md, "planJson": e.plan_json,
        "podSpec": e.pod_spec, "body": e.body,
        "createdAt": e.created_at.isoformat(), "updatedAt": e.updated_at.isoformat(),
    }


def approval_json(a: ApprovalRequest) -> dict:
    return {
        "id": str(a.id), "experimentId": str(a.experiment_id), "kind": a.kind, "title": a.title,
        "status": a.status, "requestedState": a.requested_state, "approvedState": a.approved_state,
        "rejectedState": a.rejected_state, "checklist": a.checklist, "answers": a.answers,
        "estimatedCostUsd": a.estimated_cost_usd, "resolvedAt": a.resolved_at.isoformat() if a.resolved_at else None,
        "resolvedNote": a.resolved_note, "createdAt": a.created_at.isoformat(),
    }


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ValidationError(f"{name} must be a whole number from {low} to {high}.", field=name)
    return value


def _event_page(experiment: Experiment, default_limit: int) -> dict:
    event_type = request.args.get("event_type") or None
    marker = request.args.get("marker") or None
    if marker:
        markers.check_marker(marker)
    page = events.timeline(
        experiment, limit=_int_arg("events" if "events" in request.args else "limit", default_limit, 1, 500),
        before=request.args.get("before") or None, event_type=event_type, marker=marker,
        since=events.parse_since(request.args.get("since")))
    return {"events": [events.event_json(e) for e in page.events], "nextCursor": page.next_cursor}


def _experiment_view(experiment: Experiment) -> dict:
    page = _event_page(experiment, 50)
    approvals = db.session.scalars(
        sa.select(ApprovalRequest).where(ApprovalRequest.experiment_id == experiment.id)
        .order_by(ApprovalRequest.created_at.desc()))
    return {"experiment": experiment_json(experiment), **page,
            "approvalRequests": [approval_json(a) for a in approvals]}


# --- registries ---------------------------------------------------------------------

@bp.get("/statuses")
@access.api("read")
def statuses():
    """The status registry: names, turns, board columns, terminal flags."""
    return {"statuses": [{"name": s.name, "turn": s.turn, "column": s.column,
                          "terminal": s.terminal, "owner_turn": s.owner_turn}
                         for s in registry.STATUSES]}


@bp.get("/markers")
@access.api("read")
def marker_registry():
    """The marker registry and the review vocabulary."""
    return {"markers": registry.MARKERS, "reviewPairs": registry.REVIEW_PAIRS,
            "verdicts": registry.REVIEW_VERDICTS, "maxRounds": registry.REVIEW_MAX_ROUNDS}


# --- experiments --------------------------------------------------------------------

@bp.get("/experiments")
@access.api("read")
def list_experiments():
    """Experiments, newest first; `status` filters, `limit` 1–200 (default 100)."""
    limit = _int_arg("limit", 100, 1, 200)
    query = sa.select(Experiment).order_by(Experiment.number.desc()).limit(limit)
    status = request.args.get("status")
    if status:
        if status not in registry.STATUS_BY_NAME:
            raise ValidationError(f"Unknown status {status!r}.", field="status")
        query = query.where(Experiment.status == status)
    return {"experiments": [experiment_json(e) for e in db.session.scalars(query)]}


@bp.post("/experiments")
@access.api("write")
def create_experiment():
    """Create an experiment (`title` required); answers 201 with the record."""
    data = json_body()
    experiment = experiments.create_experiment(data, access.actor())
    db.session.commit()
    return {"experiment": experiment_json(experiment)}, 201


@bp.get("/experiments/<ref>")
@access.api("read")
def get_experiment(ref: str):
    """One experiment by uuid or number, with a page of events and its approval requests."""
    return _experiment_view(experiments.get_experiment(ref))


@bp.get("/experiments/by-number/<int:number>")
@access.api("read")
def get_experiment_by_number(number: int):
    """One experiment by number (the old client's path)."""
    return _experiment_view(experiments.get_experiment(number))


@bp.patch("/experiments/<ref>")
@access.api("write")
def patch_experiment(ref: str):
    """Patch fields; `status` (+ `note`) goes through transition() (services.experiments.patch)."""
    experiment = experiments.get_experiment(ref)
    effects = experiments.patch(experiment, json_body(), access.actor())
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return {"experiment": {"id": str(experiment.id), "number": experiment.number,
                           "title": experiment.title, "status": experiment.status,
                           "turn": experiment.turn}, "ok": True}


@bp.post("/experiments/<ref>/workflow-events")
@access.api("write")
def post_workflow_event(ref: str):
    """A marker (with review fields and optional next_status) or a status change."""
    experiment = experiments.get_experiment(ref)
    data = json_body()
    actor = access.actor()
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationError("note must be text.", field="note")
    event_type = data.get("event_type") or data.get("eventType") or ("marker" if data.get("marker") else None)
    if event_type == "state_changed" or (event_type is None and data.get("to_status")):
        to = data.get("to_status") or data.get("toStatus") or data.get("next_status")
        if not to:
            raise ValidationError("A status change needs to_status.", field="to_status")
        effects = lifecycle.transition(experiment, to, actor, note=note,
                                       expected_status=data.get("from_status") or data.get("fromStatus"))
        db.session.commit()
        lifecycle.run_side_effects(effects)
        return {"id": None, "ok": True, "status": experiment.status}
    if event_type != "marker":
        raise ValidationError("Post a marker (`marker`) or a status change (`to_status`).",
                              field="event_type")
    if not isinstance(data.get("marker"), str):
        raise ValidationError("marker is required.", field="marker")
    review = {k: data[k] for k in markers.REVIEW_FIELDS if data.get(k) is not None}
    event, effects = markers.post_marker(
        experiment, data["marker"], actor, note=note, metadata=data.get("metadata"), review=review,
        next_status=data.get("next_status") or None,
        actor_label=data.get("actor_kind") or data.get("actorKind"))
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return {"id": str(event.id), "ok": True}, 201


@bp.get("/experiments/<ref>/events")
@access.api("read")
def list_events(ref: str):
    """Events newest first, filtered by event_type / marker / since, cursor-paged by `before`."""
    return _event_page(experiments.get_experiment(ref), 100)


# --- plans, questions, approvals (SPEC §4) -------------------------------------------

def plan_version_json(pv) -> dict:
    return {"id": str(pv.id), "experimentId": str(pv.experiment_id), "version": pv.version,
            "source": pv.source, "problems": pv.problems or [], "estimate": pv.estimate,
            "createdAt": pv.created_at.isoformat() if pv.created_at else None}


@bp.post("/experiments/<ref>/plans")
@access.api("write")
def submit_plan(ref: str):
    """Submit plan markdown: the version, parsed plan, problems, estimate and approval request."""
    experiment = experiments.get_experiment(ref)
    data = json_body()
    if not isinstance(data.get("markdown"), str):
        raise ValidationError("markdown (the plan text) is required.", field="markdown")
    actor = access.actor()
    source = "owner" if actor.kind == "owner" else "api"
    submission = approvals.submit_plan(experiment, data["markdown"], actor, source=source)
    db.session.commit()
    lifecycle.run_side_effects(submission.effects)
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


@bp.post("/experiments/<ref>/questions")
@access.api("write")
def ask_questions(ref: str):
    """Post clarifying questions; the experiment waits for the owner's answers."""
    experiment = experiments.get_experiment(ref)
    data = json_body()
    effects = questions.ask(experiment, data.get("questions"), access.actor())
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return {"ok": True, "experiment": {"number": experiment.number, "status": experiment.status}}, 201


@bp.post("/approvals/<request_id>/resolve")
@access.owner_api
def resolve_approval(request_id: str):
    """Approve, reject or defer with answers (the owner's session only)."""
    data = json_body()
    approval = approvals.get_request(request_id)
    effects = approvals.resolve(approval, data.get("decision"), access.actor(), answers=data.get("answers"),
                                note=data.get("note"), confirm_unchecked=bool(data.get("confirm_unchecked")))
    db.session.commit()
    lifecycle.run_side_effects(effects)
    experiment = experiments.get_experiment(approval.experiment_id)
    return {"ok": True, "approvalRequest": approval_json(approval),
            "experiment": {"number": experiment.number, "status": experiment.status,
                           "turn": experiment.turn}}


# --- agent runs (SPEC §5, §9.2) --------------------------------------------------------

RUN_EVENTS_MAX = 1000


def _after_arg() -> int:
    """`after` as an event seq: a whole number, 0 or more (default 0: from the start)."""
    raw = request.args.get("after")
    if raw is None or raw == "":
        return 0
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ValidationError("after must be an event number (a whole number, 0 or more).", field="after")
    return int(raw)


@bp.get("/runs")
@access.api("read")
def list_runs():
    """Runs newest first; `experiment` (uuid or number), `status`, `limit` 1–200 (default 100)."""
    limit = _int_arg("limit", 100, 1, 200)
    ref = (request.args.get("experiment") or "").strip()
    experiment_id = experiments.get_experiment(ref).id if ref else None
    found = runs.list_runs(experiment_id=experiment_id, status=request.args.get("status") or None, limit=limit)
    return {"runs": [runs.run_json(r) for r in found]}


@bp.get("/runs/<run_id>")
@access.api("read")
def get_run(run_id: str):
    """One run and its events after `after` (default 0), oldest first, `limit` 1–1000 (default 500).

    `nextAfter` is the cursor for the next page when `limit` events came back, else null.
    """
    after = _after_arg()
    limit = _int_arg("limit", 500, 1, RUN_EVENTS_MAX)
    run = runs.get_run(run_id)
    found = runs.events_after(run.id, after, limit)
    return {"run": runs.run_json(run), "events": [runs.event_json(e) for e in found],
            "nextAfter": found[-1].seq if len(found) == limit else None}


@bp.post("/runs/<run_id>/cancel")
@access.api("write")
def cancel_run(run_id: str):
    """Cancel a run (the run page's Cancel button does the same); 409 if it already ended."""
    run = runs.get_run(run_id)
    effects = runs.cancel_run(run, access.actor())
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return {"ok": True, "run": runs.run_json(run),
            "cancelled": run.status == "cancelled",
            "message": (f"Run {run.short_id} cancelled." if run.status == "cancelled"
                        else f"Run {run.short_id} asked to stop; it stops after its current step.")}


# --- pods and artifacts (SPEC §6, §9.2) ------------------------------------------------------------

def pod_json(pod) -> dict:
    return {"id": str(pod.id), "name": pod.name, "status": pod.status, "account": pod.account,
            "runIndex": pod.run_index, "attempt": pod.attempt, "gpuTypeId": pod.gpu_type_id,
            "gpuCount": pod.gpu_count, "cloudType": pod.cloud_type, "providerPodId": pod.provider_pod_id,
            "progressPct": pod.progress_pct, "progressMessage": pod.progress_message, "exitCode": pod.exit_code,
            "costPerHr": pod.cost_per_hr, "uptimeSeconds": pod.uptime_seconds,
            "spendUsd": None if spend.price_unknown(pod) else round(spend.pods_spend([pod]), 4),
            "priceKnown": not spend.price_unknown(pod), "stale": watcher.is_stale(pod), "stopReason": pod.stop_reason, "sshHost": pod.ssh_host,
            "sshPort": pod.ssh_port, "agentRunId": str(pod.agent_run_id) if pod.agent_run_id else None,
            "lastProgressAt": pod.last_progress_at.isoformat() if pod.last_progress_at else None}


@bp.post("/experiments/<ref>/launch-pods")
@access.api("dispatch")
def launch_pods(ref: str):
    """Start a dispatch of the approved spec; 409 naming the live dispatch if there is one."""
    experiment = experiments.get_experiment(ref)
    run, effects = provisioner.launch(experiment, access.actor())
    db.session.commit()
    lifecycle.run_side_effects(effects)
    if run is None:
        return {"ok": False, "gated": True, "experiment": {"number": experiment.number,
                                                           "status": experiment.status}}, 409
    return {"ok": True, "run": {"id": str(run.id), "status": run.status}}, 202


@bp.get("/experiments/<ref>/pods")
@access.api("read")
def list_pods(ref: str):
    """Pods with status, progress and cost."""
    experiment = experiments.get_experiment(ref)
    pods = list(db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment.id).order_by(Pod.created_at)))
    return {"pods": [pod_json(p) for p in pods], "spendUsd": round(spend.pods_spend(pods), 4),
            "spendIncomplete": any(spend.price_unknown(p) for p in pods)}  # unknown prices are not $0


@bp.post("/pods/<pod_id>/stop")
@access.api("dispatch")
def stop_pod(pod_id: str):
    """Stop one pod (volume kept); the experiment is blocked, never ended."""
    pod = get_by_id(Pod, pod_id, "No such pod.")
    effects = watcher.stop_from_owner(pod, access.actor())
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return {"ok": True, "pod": pod_json(pod)}


@bp.get("/experiments/<ref>/artifacts")
@access.api("read")
def list_artifacts(ref: str):
    """Uploaded artifacts (metadata only)."""
    experiment = experiments.get_experiment(ref)
    rows = db.session.execute(sa.select(Artifact.id, Artifact.name, Artifact.content_type, Artifact.size,
                                        Artifact.sha256, Artifact.pod_id, Artifact.created_at)
                              .where(Artifact.experiment_id == experiment.id).order_by(Artifact.name)).all()
    return {"artifacts": [{"id": str(r.id), "name": r.name, "contentType": r.content_type, "size": r.size,
                           "sha256": r.sha256, "podId": str(r.pod_id) if r.pod_id else None,
                           "createdAt": r.created_at.isoformat()} for r in rows]}


@bp.get("/artifacts/<artifact_id>")
@access.api("read")
def get_artifact(artifact_id: str):
    """One artifact's content, as a download (never rendered inline)."""
    return artifact_download(get_by_id(Artifact, artifact_id, "No such artifact."))


# --- clean results and promotion (SPEC §8.1–8.4, §9.2) ----------------------------------

def _lint_json(report) -> dict | None:
    return report.as_json() if report is not None else None


@bp.patch("/clean-results/<ref>")
@access.api("write")
def patch_clean_result(ref: str):
    """Set the clean result's body (`html`, alias `body`) and/or `title`: sanitized, versioned, linted."""
    experiment = experiments.get_experiment(ref)
    data = json_body()
    unknown = set(data) - {"html", "body", "title"}
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(sorted(unknown))}; send html and/or title.",
                              field=sorted(unknown)[0])
    html = data.get("html", data.get("body"))
    if html is not None and not isinstance(html, str):
        raise ValidationError("html must be a string of HTML.", field="html")
    if "title" in data and not isinstance(data["title"], str):
        raise ValidationError("title must be a string.", field="title")
    saved = results.save_clean_result(experiment, html, access.actor(), title=data.get("title"))
    db.session.commit()
    return {"ok": True, "version": saved.version, "changed": saved.changed, "lint": _lint_json(saved.report),
            "experiment": {"id": str(experiment.id), "number": experiment.number, "title": experiment.title,
                           "status": experiment.status, "hasCleanResult": experiment.has_clean_result}}


@bp.post("/experiments/<ref>/promote")
@access.api("write+promote")
def promote_experiment(ref: str):
    """Promote the clean result (`to`: shared | completed); 409 lint_failed unless `confirm_lint`."""
    experiment = experiments.get_experiment(ref)
    data = json_body() if request.data else {}
    confirm = data.get("confirm_lint", data.get("confirmLint", False))
    if not isinstance(confirm, bool):
        raise ValidationError("confirm_lint must be true or false.", field="confirm_lint")
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationError("note must be text.", field="note")
    to = data.get("to", "shared")
    if not isinstance(to, str):
        raise ValidationError("to must be shared or completed.", field="to")
    actor = access.actor()
    effects = results.promote(experiment, to, actor, confirm_lint=confirm, note=note,
                              expected_status=data.get("expected_status"),
                              scope_grant="promote" if actor.kind == "token" else None)
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return {"ok": True, "experiment": {"id": str(experiment.id), "number": experiment.number,
                                       "title": experiment.title, "status": experiment.status,
                                       "turn": experiment.turn},
            "lint": _lint_json(results.report_for(experiment))}
