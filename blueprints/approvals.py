"""The approval queue and the phone-first approval page (SPEC §4.4)."""
from __future__ import annotations

from flask import Blueprint, make_response, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import render
from models import Experiment, PlanVersion, db
from services.planning import approvals

bp = Blueprint("approvals", __name__)


@bp.get("/approvals")
@access.owner
def index():
    """Pending approvals, most urgent and oldest first; deferred ones last."""
    return render_template("approvals/index.html", pending=approvals.pending_queue())


def _page(approval, *, error: str | None = None, unchecked: list | None = None,
          form_answers: dict | None = None, note: str = "", status: int = 200):
    experiment = db.session.get(Experiment, approval.experiment_id)
    plan_version = db.session.get(PlanVersion, approval.plan_version_id) if approval.plan_version_id else None
    plan = (plan_version.plan_json or {}) if plan_version else {}
    answers = form_answers if form_answers is not None else (approval.answers or {})
    return render_template("approvals/detail.html", approval=approval, experiment=experiment,
                           plan_version=plan_version, plan=plan, estimate=(plan_version.estimate if plan_version else None),
                           error=error, unchecked=unchecked or [], answers=answers, note=note,
                           secrets=approvals.requested_secrets(plan),
                           terms=approvals.cost_terms(experiment, approval, plan_version.estimate if plan_version else None)
                           ), status


def _stash_name(approval) -> str:
    return f"approval:{approval.id}"


@bp.get("/approvals/<request_id>")
@access.owner
def detail(request_id: str):
    """One approval request: estimate, plan sections, checklist, textboxes, spec, decision;
    after a refused decision, the refusal and what was typed (once)."""
    approval = approvals.get_request(request_id)
    stashed = take_stash(_stash_name(approval))
    return _page(approval, error=stashed.get("error"), unchecked=stashed.get("unchecked"),
                 form_answers=stashed.get("answers"), note=stashed.get("note", ""))


@bp.post("/approvals/<request_id>/checklist")
@access.owner
def tick(request_id: str):
    """Save one checklist tick as the owner makes it; answers the item fragment."""
    approval = approvals.get_request(request_id)
    label = request.form.get("label", "")
    checked = request.form.get("checked") == "on"

    def tick_status(saved: bool, message: str):
        return render("approvals/detail.html", "approvals/_tick_status.html", saved=saved, message=message,
                      label=label)

    return perform(lambda: approvals.set_checklist_item(approval, label, checked), keyed=False,
                   refused=lambda exc: tick_status(False, exc.message), done=lambda: tick_status(True, "Saved"))


@bp.post("/approvals/<request_id>/answers")
@access.owner
def save_answers(request_id: str):
    """Autosave the typed textbox answers (the page posts them as the owner types, like
    ticks), so a reload or a closed tab keeps them; answers the save's status. A refusal
    keeps its HTTP status and its sentence, which the page shows beside the box."""
    approval = approvals.get_request(request_id)
    answers = _typed_answers()

    def save_status(saved: bool, message: str, status: int = 200):
        # Only a script posts here (no form has this action): the status line is the answer.
        return make_response(render_template("approvals/_tick_status.html", saved=saved, message=message), status)

    return perform(lambda: approvals.save_answers(approval, answers), keyed=False,
                   refused=lambda exc: save_status(False, exc.message, exc.status_code),
                   done=lambda: save_status(True, "Saved"))


def _typed_answers() -> dict:
    """The form's textbox answers (`answer-<key>` fields), by key."""
    return {key[len("answer-"):]: value for key, value in request.form.items() if key.startswith("answer-")}


@bp.post("/approvals/<request_id>/resolve")
@access.owner
def resolve(request_id: str):
    """Approve / acknowledge, defer or reject from the page (the API uses the same service).

    Always a redirect (post/redirect/get): a refusal comes back on the page once, and the
    "not ticked" confirmation opens at the anchor of its box, under the owner's thumb on a
    phone rather than below the whole plan. The form key makes a resent post do nothing."""
    approval = approvals.get_request(request_id)
    decision = request.form.get("decision")
    note = request.form.get("note", "")
    answers = _typed_answers()
    page = url_for("approvals.detail", request_id=approval.id)

    def refused(exc):
        unchecked = exc.details.get("unchecked") if getattr(exc, "code", "") == "unchecked_items" else None
        stash_for(_stash_name(approval), {"error": None if unchecked else exc.message, "unchecked": unchecked,
                                          "answers": answers, "note": note})
        return redirect(page + ("#confirm-unchecked" if unchecked else "#decision"), code=303)

    return perform(lambda: approvals.resolve(approval, decision, access.actor(), answers=answers, note=note,
                                             confirm_unchecked=request.form.get("confirm_unchecked") == "1"),
                   refused=refused, done=lambda: redirect(page, code=303))
