"""Agent runs (SPEC §5, §9.2): list, one run with its events, cancel."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, id_text, int_arg, iso
from models import AgentRun, RunEvent
from services.core.errors import ValidationError
from services.workflow import experiments, runs

routes = Routes()

RUN_EVENTS_MAX = 1000


def run_json(run: AgentRun) -> dict:
    return {
        "id": str(run.id), "kind": run.kind, "agent": run.agent, "provider": run.provider,
        "model": run.model, "status": run.status, "request": run.request,
        "scopeKind": run.scope_kind, "scopeId": id_text(run.scope_id),
        "parentRunId": id_text(run.parent_run_id), "resumesRunId": id_text(run.resumes_run_id),
        "failureReason": run.failure_reason, "lastError": run.last_error,
        "inputTokens": run.input_tokens, "outputTokens": run.output_tokens,
        "cacheCreationInputTokens": run.cache_creation_input_tokens or 0,
        "cacheReadInputTokens": run.cache_read_input_tokens or 0,
        # null with priceUnknown when the model has no price: never a made-up 0.
        "costUsd": run.cost_usd, "priceUnknown": run.cost_usd is None,
        "turns": run.turns, "lastSeq": run.last_seq,
        "heartbeatAt": iso(run.heartbeat_at), "wakeAt": iso(run.wake_at),
        "startedAt": iso(run.started_at), "completedAt": iso(run.completed_at),
        "createdAt": iso(run.created_at),
        "classification": run.classification, "classificationBy": run.classification_by,
    }


def run_event_json(event: RunEvent) -> dict:
    return {"seq": event.seq, "eventType": event.event_type, "body": event.body,
            "metadata": event.metadata_, "createdAt": event.created_at.isoformat()}


def _after_arg() -> int:
    """`after` as an event seq: a whole number, 0 or more (default 0: from the start)."""
    raw = request.args.get("after")
    if raw is None or raw == "":
        return 0
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ValidationError("after must be an event number (a whole number, 0 or more).", field="after")
    return int(raw)


@routes.get("/runs")
@access.api("read")
def list_runs():
    """Runs newest first; `experiment` (uuid or number), `status`, `classification`, `limit`
    1–200 (default 100). An unknown status or classification is 400."""
    limit = int_arg("limit", 100, 1, 200)
    ref = (request.args.get("experiment") or "").strip()
    experiment_id = experiments.get_experiment(ref).id if ref else None
    found = runs.list_runs(experiment_id=experiment_id, status=request.args.get("status") or None,
                           classification=request.args.get("classification") or None, limit=limit)
    return {"runs": [run_json(r) for r in found]}


@routes.get("/runs/<run_id>")
@access.api("read")
def get_run(run_id: str):
    """One run and its events after `after` (default 0), oldest first, `limit` 1–1000 (default 500).

    `nextAfter` is the cursor for the next page when `limit` events came back, else null.
    """
    after = _after_arg()
    limit = int_arg("limit", 500, 1, RUN_EVENTS_MAX)
    run = runs.get_run(run_id)
    found = runs.events_after(run.id, after, limit)
    return {"run": run_json(run), "events": [run_event_json(e) for e in found],
            "nextAfter": found[-1].seq if len(found) == limit else None}


@routes.post("/runs/<run_id>/cancel")
@access.api("write")
def cancel_run(run_id: str):
    """Cancel a run (the run page's Cancel button does the same); 409 if it already ended."""
    run = runs.get_run(run_id)
    effects = runs.cancel_run(run, access.actor())
    commit_then_run(effects)
    return {"ok": True, "run": run_json(run),
            "cancelled": run.status == "cancelled",
            "message": (f"Run {run.short_id} cancelled." if run.status == "cancelled"
                        else f"Run {run.short_id} asked to stop; it stops after its current step.")}


@routes.post("/runs/<run_id>/classification")
@access.api("write")
def classify_run(run_id: str):
    """Set whether the run was worth its cost: `classification` one of pending, useful,
    not_useful, archived (the owner's choice; the weekly-review agent only suggests)."""
    data = body_fields(("classification",))
    unknown = sorted(set(data) - {"classification"})
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(map(str, unknown))[:200]}.", field=str(unknown[0]))
    run = runs.get_run(run_id)
    runs.classify(run, data.get("classification"), "owner")
    commit_then_run()
    return {"run": run_json(run)}
