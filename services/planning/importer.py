"""Moving in from the old system (SPEC §9.5): its experiment `view` documents.

A document is `{experiment, events, approvalRequests}` in the old camelCase shapes.
Numbers, ids, statuses (including `awaiting_approval`), plans, pod specs, bodies and
events are kept; a result the old system had shared or completed is kept as promoted. Importing writes history as it was — it is the one writer besides
transition() that sets a status, because it records past moves rather than making one.
The old `projectId` and `beliefId` are kept where that project or belief exists here (the
experiment's project; a `tests` link to the belief), and the report says when they do not.
Importing the same document twice changes nothing: rows are keyed by the old ids.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

import sqlalchemy as sa

from models import ApprovalRequest, Experiment, PlanVersion, WorkflowEvent, db
from models.research import Belief, Project
from services.core import pod_accounts, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import ValidationError
from services.core.redact import redact, redact_data
from services.core.sanitize import sanitize_result_html
from services.planning import plans
from services.research import links
from services.results import results
from services.workflow import experiments

# "5% · bootstrap complete …": the old system logged pod progress as plain notes.
_PROGRESS_NOTE = re.compile(r"^\s*\d{1,3}(?:\.\d+)?%\s*·")


@dataclass
class ImportReport:
    experiments_created: int = 0
    experiments_skipped: int = 0
    events_created: int = 0
    approvals_created: int = 0
    messages: list[str] = field(default_factory=list)


def _time(raw, fallback: datetime | None = None) -> datetime:
    if not raw:
        return fallback or utcnow()
    try:
        moment = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValidationError(f"Bad timestamp {raw!r}.") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _uuid(raw, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(raw))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} has no valid id ({raw!r}).") from exc


def _choice(value, choices, default):
    return value if value in choices else default


def _event_type(old: dict) -> tuple[str, dict]:
    """Map an old event to our type, noting what it was when the mapping changed it."""
    kind = old.get("eventType") or "note"
    extra: dict = {}
    if kind == "state_changed" and not old.get("toStatus"):
        # The old system wrote free-form notes as status changes without a status.
        kind, extra = "note", {"legacy_event_type": "state_changed"}
    elif kind == "note" and _PROGRESS_NOTE.match(old.get("note") or ""):
        kind, extra = "progress", {"legacy_event_type": "note"}
    elif kind not in registry.WORKFLOW_EVENT_TYPES:
        kind, extra = "note", {"legacy_event_type": kind}
    return kind, extra


def _plan_json(plan_md: str | None, kind: str, account: str) -> dict | None:
    """The plan as this Sagan parses and renders it. The old system's `planJson` is never
    trusted: its `*_html` fields would be shown as they are, so they are rebuilt from the
    markdown through the one sanitizer, like any plan that arrives here."""
    if not plan_md:
        return None
    return plans.render_html(plans.parse(plan_md, kind=kind, account=account).data)


def _clean_result_body(html) -> str | None:
    """An imported clean result, through the result sanitizer on the way in (never on read)."""
    if not isinstance(html, str) or not html.strip():
        return None
    return sanitize_result_html(redact(html))


def import_document(doc: dict, report: ImportReport | None = None) -> ImportReport:
    """Import one `view` document; the caller commits. Experiment, events and approval
    requests each map an old record to our row's fields (pure), then add what is new."""
    report = report or ImportReport()
    if not isinstance(doc, dict) or not isinstance(doc.get("experiment"), dict):
        raise ValidationError("Not an old-Sagan view document: no `experiment` object.")
    old = doc["experiment"]
    exp_id, number, status = experiment_identity(old)
    experiment = db.session.get(Experiment, exp_id)
    if experiment is None:
        experiment = _create_experiment(old, exp_id, number, status)
        report.experiments_created += 1
        _keep_project(experiment, old.get("projectId"), report)
        _keep_belief(experiment, old.get("beliefId"), report)
    else:
        report.experiments_skipped += 1
    experiments.raise_counter_to(number)
    _add_events(experiment, doc.get("events") or [], report)
    _add_approval_requests(experiment, doc.get("approvalRequests") or [], report)
    db.session.flush()
    report.messages.append(f"#{number}: {status}, {report.events_created} new event(s)")
    return report


def experiment_identity(old: dict) -> tuple[uuid.UUID, int, str]:
    """The old experiment's id, number and status, each checked."""
    exp_id = _uuid(old.get("id"), "The experiment")
    try:
        number = int(old.get("number"))
    except (TypeError, ValueError):
        raise ValidationError(f"Experiment {exp_id} has no valid number ({old.get('number')!r}).")
    status = old.get("status")
    if status not in registry.STATUS_BY_NAME:
        raise ValidationError(f"#{number} has unknown status {status!r}.")
    return exp_id, number, status


def experiment_fields(old: dict, exp_id: uuid.UUID, number: int, status: str) -> dict:
    """The new experiment row's fields from the old one: unknown choices fall back to
    defaults, texts are redacted and clipped, the plan is parsed again here."""
    title = " ".join(str(old.get("title") or "").split())[:300] or f"Imported experiment #{number}"
    created = _time(old.get("createdAt"))
    kind = _choice(old.get("kind"), registry.EXPERIMENT_KINDS, "experiment")
    account = _choice(old.get("runpodAccount"), pod_accounts.ACCOUNTS, "team")
    plan_md = redact(old.get("planMd"))
    return dict(
        id=exp_id, number=number, title=redact(title), hypothesis=redact(old.get("hypothesis")),
        body=_clean_result_body(old.get("body")), plan_md=plan_md, plan_json=_plan_json(plan_md, kind, account),
        pod_spec=redact_data(old.get("podSpec")), config_yaml=redact(old.get("configYaml")), status=status,
        kind=kind,
        compute_size=_choice(old.get("computeSize"), registry.COMPUTE_SIZES, None),
        priority=_choice(old.get("priority"), registry.PRIORITIES, "normal"),
        assignee_kind=_choice(old.get("assigneeKind"), registry.ASSIGNEE_KINDS, "agent"),
        tags=[str(t)[:80] for t in (old.get("tags") or [])][:50],
        has_clean_result=bool(old.get("hasCleanResult")),
        auto_approve_plan=bool(old.get("autoApprovePlan")),
        pod_account=account,
        created_at=created, updated_at=_time(old.get("updatedAt"), created),
    )


def _create_experiment(old: dict, exp_id: uuid.UUID, number: int, status: str) -> Experiment:
    clash = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
    if clash is not None:
        raise ValidationError(f"#{number} already exists here as a different experiment ({clash.id}).")
    experiment = Experiment(**experiment_fields(old, exp_id, number, status))
    db.session.add(experiment)
    db.session.flush()
    if experiment.plan_md:
        db.session.add(PlanVersion(id=uuid.uuid4(), experiment_id=exp_id, version=1,
                                   markdown=experiment.plan_md, plan_json=experiment.plan_json,
                                   source="import", created_at=experiment.created_at,
                                   updated_at=experiment.created_at))
    if status in registry.PROMOTION_TARGETS and experiment.has_clean_result and experiment.body:
        # Promoted in the old system: its mentors read this body, so share links here show it.
        results.record_promotion(experiment, status, at=experiment.updated_at)
    return experiment


def _keep_project(experiment: Experiment, old_project_id, report: ImportReport) -> None:
    """Keep the old system's `projectId` when a project with that id is here; otherwise the
    experiment comes in without one, and the report says so (experiments.project_id must
    always name a project)."""
    if not old_project_id:
        return
    try:
        project_id = uuid.UUID(str(old_project_id))
    except ValueError:
        project_id = None
    if project_id is not None and db.session.get(Project, project_id) is not None:
        experiment.project_id = project_id
        return
    report.messages.append(f"#{experiment.number}: the old project {str(old_project_id)[:60]} is not here; "
                           "imported without a project.")


def _keep_belief(experiment: Experiment, old_belief_id, report: ImportReport) -> None:
    """The old system's `beliefId` (the belief an experiment tests) as a `tests` link when a
    belief with that id is here; otherwise no link, and the report says so."""
    if not old_belief_id:
        return
    try:
        belief = db.session.get(Belief, uuid.UUID(str(old_belief_id)))
    except ValueError:
        belief = None
    if belief is None:
        report.messages.append(f"#{experiment.number}: the old belief {str(old_belief_id)[:60]} is not here; "
                               "imported without linking it.")
        return
    links.create_link(links.describe("experiment", experiment), "tests", links.describe("belief", belief),
                      Actor.system("import"), note="The old system recorded this experiment as testing it.")


def event_fields(old_event: dict, exp_id: uuid.UUID) -> dict:
    """A workflow event row's fields from an old event: its type mapped (the old type kept in
    the metadata when it changed), metadata always an object, texts redacted and clipped."""
    kind, extra = _event_type(old_event)
    metadata = old_event.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        metadata = {"value": metadata}
    if extra:
        metadata = {**(metadata or {}), **extra}
    stamp = _time(old_event.get("createdAt"))
    return dict(
        id=_uuid(old_event.get("id"), "An event"), entity_kind="experiment", entity_id=exp_id,
        experiment_id=exp_id, event_type=kind,
        from_status=_choice(old_event.get("fromStatus"), registry.STATUS_BY_NAME, None),
        to_status=_choice(old_event.get("toStatus"), registry.STATUS_BY_NAME, None),
        marker=old_event.get("marker") if kind == "marker" else None,
        actor_kind=_choice(old_event.get("actorKind"), registry.ACTOR_KINDS, "system"),
        actor_id=str(old_event.get("actorUserId"))[:64] if old_event.get("actorUserId") else None,
        note=(redact(old_event.get("note")) or "")[:2000] or None,
        metadata_=redact_data(metadata) if metadata else None, created_at=stamp, updated_at=stamp)


def _add_events(experiment: Experiment, old_events: list, report: ImportReport) -> None:
    """The events not imported before; the experiment's last event time follows them."""
    known = set(db.session.scalars(sa.select(WorkflowEvent.id).where(WorkflowEvent.entity_id == experiment.id)))
    latest = experiment.last_event_at
    added = 0
    for old_event in old_events:
        if _uuid(old_event.get("id"), "An event") in known:
            continue
        fields = event_fields(old_event, experiment.id)
        db.session.add(WorkflowEvent(**fields))
        report.events_created += 1
        added += 1
        latest = max(latest, fields["created_at"]) if latest else fields["created_at"]
    experiment.last_event_at = latest
    if added:
        # Backdated events do not move the timeline's newest stamp, which an open page's
        # poll watches (the panels declared in blueprints/experiment_panels.py): the experiment's own edit does.
        experiment.updated_at = utcnow()


def approval_fields(old_request: dict, exp_id: uuid.UUID, experiment_title: str) -> dict:
    """An approval request row's fields from an old one, with the old system's defaults."""
    stamp = _time(old_request.get("createdAt"))
    return dict(
        id=_uuid(old_request.get("id"), "An approval request"), experiment_id=exp_id,
        kind=_choice(old_request.get("kind"), registry.APPROVAL_KINDS, "experiment_plan"),
        title=(old_request.get("title") or f"Approve experiment plan: {experiment_title}")[:400],
        status=_choice(old_request.get("status"), registry.APPROVAL_STATUSES, "pending"),
        requested_state=old_request.get("requestedState") or "plan_pending",
        approved_state=old_request.get("approvedState") or "approved",
        rejected_state=old_request.get("rejectedState") or "planning",
        checklist=old_request.get("checklist") or {}, answers=old_request.get("answers") or {},
        requested_by=str(old_request.get("requestedBy") or "")[:64] or None,
        resolved_by=str(old_request.get("resolvedBy") or "")[:64] or None,
        resolved_at=_time(old_request["resolvedAt"]) if old_request.get("resolvedAt") else None,
        resolved_note=(redact(old_request.get("resolvedNote")) or "")[:2000] or None,
        created_at=stamp, updated_at=_time(old_request.get("updatedAt"), stamp))


def _add_approval_requests(experiment: Experiment, old_requests: list, report: ImportReport) -> None:
    for old_request in old_requests:
        if db.session.get(ApprovalRequest, _uuid(old_request.get("id"), "An approval request")) is not None:
            continue
        db.session.add(ApprovalRequest(**approval_fields(old_request, experiment.id, experiment.title)))
        report.approvals_created += 1
