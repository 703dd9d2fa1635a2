"""Plan versions and approval requests (SPEC §4.2–4.5).

Every submitted plan is kept as a PlanVersion, valid or not. A valid plan creates an
approval request (superseding older pending ones — the old system piled up six) and moves
the experiment to `plan_pending`. Resolving a request is a compare-and-set on its status,
so two taps or two tabs resolve it once.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, ApprovalRequest, Experiment, PlanVersion, db
from services.core import events, pod_accounts, registry, settings
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, TooLarge, Unprocessable, ValidationError
from services.core.records import get_by_id
from services.core.redact import redact
from services.core.unlocked import outside_transaction
from services.dispatch import costs, pod_secrets
from services.dispatch.spec import as_pods, without_git_env
from services.planning import plans, questions
from services.workflow import lifecycle, markers, runs
from services.workflow.orchestration import begin_orchestrator

AUTO_APPROVE_NOTE = "Auto-approved follow-up plan (experiment.auto_approve_plan=true)."
AUTO_APPROVE_EVENT = "experiment.auto_approve_plan=true — skipping owner gate"


@dataclass
class Submission:
    plan_version: PlanVersion
    approval: ApprovalRequest | None
    problems: list[str]
    estimate: dict | None
    effects: list[lifecycle.SideEffect]
    auto_approved: bool = False

    @property
    def valid(self) -> bool:
        return self.approval is not None


def _lock(experiment: Experiment) -> Experiment:
    """Row-lock the experiment so concurrent submissions number versions in turn."""
    db.session.execute(sa.select(Experiment.id).where(Experiment.id == experiment.id).with_for_update())
    return experiment


def not_a_plan_message(parsed: plans.ParsedPlan, source: str) -> str:
    """Why a text is not a plan, naming the sections it lacks; an agent or API client is also
    told where questions go instead."""
    count = parsed.data["section_count"]
    missing = plans.missing_sections(parsed.data)
    message = (f"This has {count} of the {len(plans.SECTIONS)} plan sections; a plan needs at least "
               f"{plans.MIN_SECTIONS_FOR_PLAN}, so it reads as questions, not a plan. Missing: "
               f"{', '.join(missing)}.")
    if source == "owner":
        return message + " Start from the template under the box, or add the sections as ## headings."
    return message + " To ask clarifying questions instead: POST /api/experiments/<id>/questions."


@dataclass(frozen=True)
class PreparedPlan:
    """A plan checked, redacted, parsed and rendered, ready to store: no database needed."""

    markdown: str
    parsed: plans.ParsedPlan
    plan_json: dict


def prepare_plan(experiment: Experiment, markdown, *, source: str = "agent") -> PreparedPlan:
    """Check, redact, parse and render a plan for `experiment`, writing nothing (`source`:
    who writes it, for the wording of a refusal).

    The render (every section's markdown through the sanitizer) runs with no transaction
    open (services.core.unlocked): on SQLite an open one holds the write lock. Raises as
    submit_plan does for an empty, oversized or questions-only text.
    """
    if not isinstance(markdown, str) or not markdown.strip():
        raise ValidationError("The plan is empty.", field="markdown")
    limit = current_app.config["MARKDOWN_MAX"]
    if len(markdown.encode()) > limit:
        raise TooLarge(f"The plan is {len(markdown.encode()):,} bytes; the limit is {limit:,}.")
    # Read what the parse needs first: ending the transaction expires loaded rows.
    kind, account, allowed = experiment.kind, experiment.pod_account, pod_secrets.allowlist()
    return outside_transaction(prepare_plan_text, markdown, kind, account, allowed, source)


def prepare_plan_text(markdown: str, kind: str, account: str | None, allowed: list[str],
                      source: str = "agent") -> PreparedPlan:
    """prepare_plan's work, a pure function of its arguments; called directly only for
    Sagan's own text (the demo's plan), where no outside text renders under the lock."""
    markdown = plans.redact_plan(markdown)
    parsed = plans.parse(markdown, kind=kind, account=account, allowed_secrets=allowed)
    if not parsed.is_plan:
        raise Unprocessable(not_a_plan_message(parsed, source), code="not_a_plan")
    return PreparedPlan(markdown, parsed, plans.render_html(parsed.data))


def submit_plan(experiment: Experiment, markdown: str | PreparedPlan, actor: Actor, *, source: str,
                agent_run_id=None) -> Submission:
    """Store a plan version; if valid, open an approval request. The caller commits.

    `markdown` is the plan's text, or a PreparedPlan (prepare_plan) made before the caller
    opened a transaction. Raises Unprocessable(not_a_plan) for a questions-only text
    (nothing stored). An invalid spec is stored with its problems and opens no request.
    """
    if source not in registry.PLAN_SOURCES:
        raise ValidationError(f"Unknown plan source {source!r}.", field="source")
    prepared = markdown if isinstance(markdown, PreparedPlan) else prepare_plan(experiment, markdown, source=source)
    markdown, parsed = prepared.markdown, prepared.parsed
    if experiment.terminal:
        raise Conflict(f"#{experiment.number} is {experiment.status}; reopen it before planning.",
                       code="experiment_finished")
    _lock(experiment)
    version = (db.session.scalar(sa.select(sa.func.max(PlanVersion.version))
                                 .where(PlanVersion.experiment_id == experiment.id)) or 0) + 1
    estimate = None
    if parsed.data["spec"] is not None and not parsed.data["spec_error"]:
        pods = as_pods(parsed.data["spec"])
        # Pods on the local backend run on this machine: no bill to estimate — unless the
        # substitution policy lets them fall back to a paid account, which is priced.
        accounts = costs.accounts_of(pods, experiment.pod_account)
        estimate = costs.estimate(pods, costs.owner_gpu_prices(), local=not costs.is_paid(accounts)).as_json()
        estimate["accounts"] = sorted(accounts)
    plan_json = prepared.plan_json
    plan_version = PlanVersion(
        id=uuid.uuid4(), experiment_id=experiment.id, version=version, markdown=markdown,
        plan_json=plan_json, problems=parsed.problems, estimate=estimate, source=source,
        agent_run_id=agent_run_id)
    db.session.add(plan_version)
    experiment.plan_md = markdown
    experiment.plan_json = plan_json
    db.session.flush()

    if parsed.data["spec_error"]:
        events.record(experiment, "note", actor,
                      note=f"Plan v{version} submitted with an invalid runpod-spec; no approval requested.",
                      metadata={"plan_version": version, "problems": parsed.problems[:20]})
        return Submission(plan_version, None, parsed.problems, estimate, [])

    effects = _move_to_plan_pending(experiment, actor, version)
    superseded = db.session.execute(
        sa.update(ApprovalRequest)
        .where(ApprovalRequest.experiment_id == experiment.id, ApprovalRequest.status == "pending")
        .values(status="superseded", resolved_at=utcnow(),
                resolved_note=f"Superseded by plan v{version}.", updated_at=utcnow())
        .execution_options(synchronize_session=False)).rowcount
    approval = ApprovalRequest(
        id=uuid.uuid4(), experiment_id=experiment.id, plan_version_id=plan_version.id,
        agent_run_id=agent_run_id, kind="experiment_plan",
        title=f"Approve experiment plan: {experiment.title}"[:400], status="pending",
        # Every box is the owner's to tick: the planner's own `[x]` stays in the plan (shown
        # beside the box as "planner: checked"), never pre-ticks the owner's answer.
        checklist={item["label"][:500]: False for item in parsed.data["checklist"]},
        answers={}, estimated_cost_usd=(estimate or {}).get("total_usd"),
        pod_account=experiment.pod_account, requested_by=actor.id or actor.kind)
    db.session.add(approval)
    db.session.flush()
    events.record(experiment, "approval_requested", actor, note="Experiment plan approval requested.",
                  to_status="plan_pending",
                  metadata={"approval_request_id": str(approval.id), "plan_version": version,
                            "superseded": superseded, "is_blocker": parsed.data["is_blocker"]})
    submission = Submission(plan_version, approval, parsed.problems, estimate, effects)
    if _auto_approvable(experiment, parsed.data, estimate):
        submission.effects += _auto_approve(experiment, approval, plan_version, estimate)
        submission.auto_approved = True
    return submission


def _move_to_plan_pending(experiment: Experiment, actor: Actor, version: int) -> list:
    if experiment.status in ("plan_pending", "awaiting_approval"):
        return []  # a new version replaces the pending one; the status stays
    effects = []
    if experiment.status == "proposed":
        effects += lifecycle.transition(experiment, "planning", actor,
                                        note=f"Plan v{version} submitted for an idea.")
    if experiment.status == "blocked" and actor.kind == "owner":
        return effects + lifecycle.transition(experiment, "plan_pending", actor,
                                              note=f"Plan v{version} submitted by the owner.")
    if experiment.status not in ("clarifying", "planning"):
        raise Conflict(f"#{experiment.number} is {experiment.status}; a plan can be submitted while "
                       "it is proposed, clarifying or planning.", code="transition_not_allowed")
    # The move to plan_pending is the system's: a valid plan arrived (SPEC §2.3).
    return effects + lifecycle.transition(experiment, "plan_pending", Actor.system(),
                                          note=f"Valid plan v{version} submitted; approval requested.",
                                          metadata={"plan_version": version, "submitted_by": actor.kind})


def _auto_approvable(experiment: Experiment, plan_json: dict, estimate: dict | None) -> bool:
    """SPEC §4.5: flag on, not a blocker, a known estimate under the limit."""
    if not experiment.auto_approve_plan or plan_json.get("is_blocker"):
        return False
    if experiment.kind == "experiment" and plan_json.get("spec") and any(
            pod_accounts.on_this_host(a) for a in costs.accounts_of(as_pods(plan_json["spec"]) or [],
                                                                    experiment.pod_account)):
        # An auto-approved plan never dispatches to the local backend (SPEC §6.9), not even as
        # its account policy's fallback.
        return False
    limit = float(settings.get("auto_approve_max_usd") or 0)
    total = (estimate or {}).get("total_usd") if plan_json.get("spec") else 0.0
    return total is not None and total < limit


def _auto_approve(experiment: Experiment, approval: ApprovalRequest, plan_version: PlanVersion,
                  estimate: dict | None) -> list:
    system = Actor.system("auto-approve")
    if approval.agent_run_id:
        runs.append_event(approval.agent_run_id, "auto_approved", AUTO_APPROVE_EVENT)
    effects = _resolve_approved(experiment, approval, plan_version, system, answers={},
                                note=AUTO_APPROVE_NOTE,
                                metadata={"auto_approve_plan": True,
                                          "limit_usd": float(settings.get("auto_approve_max_usd") or 0),
                                          "estimate_usd": (estimate or {}).get("total_usd")})
    return effects


# --- resolving ------------------------------------------------------------------------

def get_request(request_id) -> ApprovalRequest:
    return get_by_id(ApprovalRequest, request_id, "No such approval request.")


def clean_answers(plan_json: dict, answers) -> dict:
    """Textbox answers: only the plan's keys, text, capped, redacted; blanks dropped."""
    if answers is None:
        return {}
    if not isinstance(answers, dict):
        raise ValidationError("answers must map textbox keys to text.", field="answers")
    return questions.clean_answers(answers, set(plan_json.get("textboxes") or []),
                                   unknown="The plan has no textbox {key!r}.")


def _claim(approval: ApprovalRequest, new_status: str, actor: Actor, note: str | None) -> None:
    """Compare-and-set the request out of `pending`: the second of two taps gets a Conflict."""
    now = utcnow()
    result = db.session.execute(
        sa.update(ApprovalRequest)
        .where(ApprovalRequest.id == approval.id, ApprovalRequest.status == "pending")
        .values(status=new_status, resolved_by=actor.id or actor.kind, resolved_at=now,
                resolved_note=note, updated_at=now)
        .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        db.session.refresh(approval)
        raise Conflict(f"This approval request is already {approval.status}; nothing was changed.",
                       code="already_resolved", current=approval.status)
    db.session.refresh(approval)


def _plan_version(approval: ApprovalRequest) -> PlanVersion:
    plan_version = db.session.get(PlanVersion, approval.plan_version_id) if approval.plan_version_id else None
    if plan_version is None or plan_version.plan_json is None:
        raise Conflict("This request has no parsed plan to approve (imported or removed).",
                       code="no_plan")
    return plan_version


def _take(approval: ApprovalRequest, status: str, actor: Actor, note: str | None, answers: dict) -> None:
    """The first half of every decision: claim the request (compare-and-set), keep the answers,
    and close the plan run that waited on it."""
    _claim(approval, status, actor, note)
    approval.answers = answers
    _close_plan_run(approval)


def _record_decision(experiment: Experiment, approval: ApprovalRequest, decision: str, actor: Actor,
                     note: str | None, answers: dict) -> None:
    """The second half, after the experiment's move: the decision and the textbox answers on the timeline."""
    events.record(experiment, "approval_resolved", actor, note=note,
                  metadata={"approval_request_id": str(approval.id), "decision": decision})
    if answers:
        markers.post_marker(experiment, "epm:textbox-answers", actor, metadata={"answers": answers})


def _check_account_unchanged(experiment: Experiment, approval: ApprovalRequest) -> None:
    """The plan was estimated for the account it was submitted under: approving it for
    another (a token patched the experiment meanwhile) would approve a cost nobody saw."""
    if approval.pod_account and experiment.pod_account != approval.pod_account:
        raise Conflict(f"#{experiment.number}'s pod account changed from {approval.pod_account} to "
                       f"{experiment.pod_account} after this plan was submitted; its estimate is for "
                       f"{approval.pod_account}. Ask for a new plan.", code="account_changed")


def _resolve_approved(experiment, approval, plan_version, actor, *, answers, note, metadata=None):
    _check_account_unchanged(experiment, approval)
    _take(approval, "approved", actor, note, answers)
    plan_json = plan_version.plan_json
    # The approved spec is stored from the approved version, in this transaction (SPEC §4.2).
    experiment.pod_spec = plan_json.get("spec")
    total = (plan_version.estimate or {}).get("total_usd")
    if experiment.cost_cap_usd is None and total:
        experiment.cost_cap_usd = round(1.5 * total, 2)  # the default cap (SPEC §6.8)
    # An unknown (or $0) estimate sets no cap: a paid dispatch then waits for the owner's.
    approval.cost_cap_usd = experiment.cost_cap_usd
    experiment.plan_md = plan_version.markdown
    experiment.plan_json = plan_json
    effects = lifecycle.transition(experiment, "approved", actor, note=note,
                                   metadata={"approval_request_id": str(approval.id),
                                             "plan_version": plan_version.version, **(metadata or {})})
    _record_decision(experiment, approval, "approved", actor, note, answers)
    # The orchestrator starts in this same transaction: the experiment ends at
    # `implementing`, never showing `approved` while its orchestrator already works.
    return effects + begin_orchestrator(experiment, actor, plan_run_id=approval.agent_run_id)


def _close_plan_run(approval: ApprovalRequest) -> None:
    """The plan run that waited on this request is done once the owner decided."""
    if not approval.agent_run_id:
        return
    run = db.session.get(AgentRun, approval.agent_run_id)
    if run is not None and run.status == "awaiting_approval":
        runs.set_status(run, "completed")


def approve(approval: ApprovalRequest, actor: Actor, *, answers=None, note: str | None = None,
            confirm_unchecked: bool = False) -> list[lifecycle.SideEffect]:
    """Approve (or, for a blocker plan, acknowledge) a pending request. The caller commits."""
    experiment = db.session.get(Experiment, approval.experiment_id)
    plan_version = _plan_version(approval)
    plan_json = plan_version.plan_json
    answers = clean_answers(plan_json, answers)
    if approval.status != "pending":
        raise Conflict(f"This approval request is already {approval.status}; nothing was changed.",
                       code="already_resolved", current=approval.status)
    if plans.spec_is_valid(plan_json) is False:
        raise Unprocessable("The plan's runpod-spec is invalid; fix the plan before approving.",
                            code="invalid_spec", problems=plan_version.problems or [])
    refused = [s["name"] for s in requested_secrets(plan_json) if not s["allowed"]]
    if refused:
        raise Unprocessable(f"The plan asks for secret(s) not on the pod-secret allowlist: {', '.join(refused)}. "
                            "Add them in Settings or ask for a plan without them.", code="secrets_not_allowed",
                            secrets=refused)
    if plan_json.get("is_blocker"):
        return acknowledge_blocker(experiment, approval, plan_version, actor, answers, note)
    unchecked = [label for label, checked in (approval.checklist or {}).items() if not checked]
    if unchecked and not confirm_unchecked:
        raise ValidationError(f"{len(unchecked)} checklist item(s) are not ticked; confirm to approve anyway.",
                              code="unchecked_items", unchecked=unchecked)
    note = (note or "").strip() or "Plan approved by the owner."
    return _resolve_approved(experiment, approval, plan_version, actor, answers=answers, note=note)


def cost_terms(experiment: Experiment, approval: ApprovalRequest, estimate: dict | None) -> dict:
    """What approving fixes, for the approval page: the account, whether it bills, and the cap
    (the experiment's, else 1.5× a known estimate, else none — a paid dispatch then waits)."""
    account = approval.pod_account or experiment.pod_account
    accounts = (estimate or {}).get("accounts") or [account]
    total = (estimate or {}).get("total_usd")
    if approval.status == "approved":
        cap = approval.cost_cap_usd
    else:
        cap = experiment.cost_cap_usd if experiment.cost_cap_usd is not None else (
            round(1.5 * total, 2) if total else None)
    return {"account": account, "accounts": accounts, "paid": costs.is_paid(set(accounts)), "cap": cap,
            "account_changed": experiment.pod_account != account}


def requested_secrets(plan_json: dict) -> list[dict]:
    """Each server secret the plan's pods would receive, and whether the allowlist allows it now."""
    allowed = set(pod_secrets.allowlist())
    return [{"name": name, "allowed": name in allowed}
            for name in pod_secrets.requested((plan_json or {}).get("spec"))]


def acknowledge_blocker(experiment, approval, plan_version, actor, answers, note) -> list:
    """A blocker plan: record the answers, resolve, and block with the plan's reason."""
    _take(approval, "approved", actor, (note or "Blocker acknowledged.").strip(), answers)
    reason = _blocker_reason(plan_version.plan_json)
    effects = lifecycle.transition(experiment, "blocked", actor,
                                   note=f"Blocker plan v{plan_version.version} acknowledged: {reason}"[:1900],
                                   metadata={"approval_request_id": str(approval.id), "blocker": True})
    _record_decision(experiment, approval, "acknowledged", actor, "Blocker acknowledged; nothing dispatched.",
                     answers)
    return effects


def _blocker_reason(plan_json: dict) -> str:
    for field in ("kill_criterion", "compute", "goal"):
        text = (plan_json.get(field) or "").strip()
        if text:
            return " ".join(text.split())[:600]
    return "the plan has no runpod-spec, so compute must not launch."


def reject(approval: ApprovalRequest, actor: Actor, *, note: str, answers=None) -> list:
    """Reject with a required note: experiment → planning, planner re-dispatched with it."""
    note = (note or "").strip()
    if not note:
        raise ValidationError("Say why you reject the plan; the planner gets your note.", field="note")
    experiment = db.session.get(Experiment, approval.experiment_id)
    plan_json = _plan_version(approval).plan_json
    answers = clean_answers(plan_json, answers)
    _take(approval, "rejected", actor, note, answers)
    effects = lifecycle.transition(experiment, approval.rejected_state or "planning", actor, note=note,
                                   metadata={"approval_request_id": str(approval.id)})
    _record_decision(experiment, approval, "rejected", actor, note, answers)
    return effects


def defer(approval: ApprovalRequest, actor: Actor, *, note: str | None = None, answers=None) -> None:
    """Keep it pending with a note, lower in the queue."""
    if approval.status != "pending":
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    plan_json = _plan_version(approval).plan_json
    approval.answers = clean_answers(plan_json, answers) or approval.answers
    approval.deferred_at = utcnow()
    approval.defer_note = redact((note or "").strip()) or None
    experiment = db.session.get(Experiment, approval.experiment_id)
    events.record(experiment, "note", actor, note=f"Approval deferred. {approval.defer_note or ''}".strip(),
                  metadata={"approval_request_id": str(approval.id), "decision": "deferred"})


def set_checklist_item(approval: ApprovalRequest, label: str, checked: bool) -> None:
    """Save one tick as the owner makes it (the page posts each change)."""
    if approval.status != "pending":
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    if label not in (approval.checklist or {}):
        raise ValidationError("That item is not on this plan's checklist.", field="label")
    approval.checklist = {**approval.checklist, label: bool(checked)}


def save_answers(approval: ApprovalRequest, answers) -> dict:
    """Autosave typed textbox answers as the owner types them (the page posts each change, as
    it does ticks): merged into the request's answers, a blank one removed. The decision
    later sends the whole form, which replaces them. Returns the request's answers."""
    if approval.status != "pending":
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    if not isinstance(answers, dict) or not answers:
        raise ValidationError("Send at least one answer to save.", field="answers")
    plan_json = _plan_version(approval).plan_json
    cleaned = clean_answers(plan_json, answers)
    merged = {key: value for key, value in (approval.answers or {}).items() if key not in answers}
    approval.answers = merged | cleaned
    return approval.answers


def pending_queue() -> list[tuple[ApprovalRequest, Experiment]]:
    """Pending requests: deferred last, then by priority (urgent first) and age (oldest first)."""
    rank = sa.case(registry.PRIORITY_RANK, value=Experiment.priority)
    return list(db.session.execute(
        sa.select(ApprovalRequest, Experiment).join(Experiment, Experiment.id == ApprovalRequest.experiment_id)
        .where(ApprovalRequest.status == "pending")
        .order_by(ApprovalRequest.deferred_at.is_not(None), rank.desc(), ApprovalRequest.created_at)).all())


@dataclass
class PlanOverview:
    current: PlanVersion | None
    versions: list[PlanVersion]
    approved_version_id: object | None
    pending: ApprovalRequest | None
    spec_diff: str | None   # unified diff: approved plan's spec → the stored spec
    requests: list[ApprovalRequest]


def requests_of(experiment: Experiment) -> list[ApprovalRequest]:
    """The experiment's approval requests, newest first."""
    return list(db.session.scalars(
        sa.select(ApprovalRequest).where(ApprovalRequest.experiment_id == experiment.id)
        .order_by(ApprovalRequest.created_at.desc())))


def plan_overview(experiment: Experiment) -> PlanOverview:
    """What the experiment page shows about plans, in three queries."""
    import difflib
    import json

    versions = list(db.session.scalars(
        sa.select(PlanVersion).where(PlanVersion.experiment_id == experiment.id)
        .order_by(PlanVersion.version.desc())))
    requests = requests_of(experiment)
    approved = next((r for r in requests if r.status == "approved" and r.plan_version_id), None)
    pending = next((r for r in requests if r.status == "pending"), None)
    diff = None
    if approved is not None:
        approved_version = next((v for v in versions if v.id == approved.plan_version_id), None)
        approved_spec = (approved_version.plan_json or {}).get("spec") if approved_version else None
        # The branch and commit Sagan splices in after the tests pass are no change to what
        # was approved (the provisioner compares the same way): no alarm for them.
        approved_pods, stored_pods = without_git_env(approved_spec), without_git_env(experiment.pod_spec)
        if approved_version is not None and approved_pods != stored_pods:
            def lines(value):
                return json.dumps(value, indent=2, sort_keys=True).splitlines()
            diff = "\n".join(difflib.unified_diff(
                lines(approved_pods), lines(stored_pods),
                f"approved plan v{approved_version.version}", "stored pod_spec", lineterm=""))
    return PlanOverview(versions[0] if versions else None, versions,
                        approved.plan_version_id if approved else None, pending, diff, requests)


def resolve(approval: ApprovalRequest, decision, actor: Actor, *, answers=None, note: str | None = None,
            confirm_unchecked: bool = False) -> list:
    """The owner's decision on a request, from the page or the API alike. The caller commits."""
    if decision == "approve":
        return approve(approval, actor, answers=answers, note=note, confirm_unchecked=confirm_unchecked)
    if decision == "reject":
        return reject(approval, actor, note=note or "", answers=answers)
    if decision == "defer":
        defer(approval, actor, note=note, answers=answers)
        return []
    raise ValidationError("Choose approve, defer or reject.", field="decision")


def take_for_demo(experiment: Experiment, actor: Actor) -> ApprovalRequest:
    """Demo data only (services.pipeline.demo.walk_to): the pending request approved and its plan
    stored as an approval would, without starting an orchestrator (the tour's later steps
    stand in for its work). The caller makes the move, with this request's id."""
    approval = db.session.scalar(sa.select(ApprovalRequest).where(
        ApprovalRequest.experiment_id == experiment.id, ApprovalRequest.status == "pending")
        .order_by(ApprovalRequest.created_at.desc()).limit(1))
    if approval is None:
        raise Conflict(f"#{experiment.number} has no pending approval request.", code="no_plan_to_approve")
    plan_version = _plan_version(approval)
    _take(approval, "approved", actor, "Demo: plan approved for the tour.", {})
    experiment.pod_spec = plan_version.plan_json.get("spec")
    experiment.plan_md, experiment.plan_json = plan_version.markdown, plan_version.plan_json
    _record_decision(experiment, approval, "approved", actor, "Demo: plan approved for the tour.", {})
    return approval


def approve_from_board(experiment: Experiment, actor: Actor, note: str) -> list | None:
    """A board move approving the pending plan (SPEC §2.4); None when no request is pending."""
    approval = db.session.scalar(sa.select(ApprovalRequest).where(
        ApprovalRequest.experiment_id == experiment.id, ApprovalRequest.status == "pending")
        .order_by(ApprovalRequest.created_at.desc()).limit(1))
    if approval is None:
        return None
    # Moving the card is the owner's explicit decision, so unticked items do not stop it.
    return approve(approval, actor, note=note, confirm_unchecked=True)
