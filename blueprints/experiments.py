"""Experiment pages: the table, the new-experiment form, one experiment's page."""
from __future__ import annotations

from flask import Blueprint, current_app, redirect, render_template, request, url_for

from blueprints import access
from blueprints._htmx import is_fragment_request, render
from models import db
from services import (approvals, code_view, cost_ledger, events, experiments, lifecycle, markers, metrics,
                      questions, registry)
from services.dispatch import view as pod_view
from services.errors import SaganError, ValidationError

bp = Blueprint("experiments", __name__)

FORM_FIELDS = ("title", "hypothesis", "kind", "priority", "compute_size", "tags")
# The code pods run (SPEC §5.7): editable on the record, not on the new-experiment form.
EDIT_FIELDS = FORM_FIELDS + ("git_branch", "git_commit")


def _form_choices() -> dict:
    return {"kinds": registry.EXPERIMENT_KINDS, "priorities": registry.PRIORITIES,
            "compute_sizes": registry.COMPUTE_SIZES}


@bp.get("/experiments")
@access.owner
def index():
    """All experiments as a sortable, filterable table."""
    page, state = experiments.table(request.args)
    return render("experiments/index.html", "experiments/_table.html", page=page, state=state,
                  statuses=registry.STATUS_NAMES, **_form_choices())


@bp.route("/experiments/new", methods=["GET", "POST"])
@access.owner
def new():
    """The new-experiment form; errors re-render it with the message (STYLE §8)."""
    form = {name: request.form.get(name, "") for name in FORM_FIELDS}
    error = None
    if request.method == "POST":
        try:
            experiment = experiments.create_experiment(
                {k: v for k, v in form.items() if v != "" or k == "title"}, access.actor())
        except ValidationError as exc:
            db.session.rollback()
            error = exc
        else:
            db.session.commit()
            return redirect(url_for("experiments.detail", number=experiment.number), code=303)
    return render_template("experiments/new.html", form=form, error=error, **_form_choices())


def _timeline_filters() -> dict:
    """Timeline filters from the query string; unknown values are dropped, not errors."""
    event_type = request.args.get("event_type") or None
    marker = request.args.get("marker") or None
    return {"event_type": event_type if event_type in registry.WORKFLOW_EVENT_TYPES else None,
            "marker": marker if marker in registry.MARKERS else None}


def _detail_context(experiment, **extra) -> dict:
    page = events.timeline(experiment, limit=current_app.config["TIMELINE_PAGE_SIZE"],
                           **_timeline_filters())
    parent = experiments.get_experiment(experiment.parent_experiment_id) \
        if experiment.parent_experiment_id else None
    return {"experiment": experiment, "timeline": page, "parent": parent,
            "moves": lifecycle.allowed_moves(experiment, "owner"),
            "event_types": registry.WORKFLOW_EVENT_TYPES, "marker_names": registry.MARKERS,
            "filters": _timeline_filters(), "review_loops": markers.review_loops_for(experiment),
            "plans": approvals.plan_overview(experiment), "plan_error": None, "plan_text": None,
            "pod_cards": pod_view.pods_for(experiment), "pod_dispatch": pod_view.live_dispatch(experiment),
            "pod_can_dispatch": pod_view.can_dispatch(experiment), "artifact_views": pod_view.artifacts_for(experiment),
            "open_questions": questions.open_questions(experiment), "answer_error": None, "answers": None,
            "status_error": None, "override_error": None,
            "edit_error": None, **_result_context(experiment), **code_view.page_context(experiment),
            **metrics.page_context(experiment), **cost_ledger.page_context(experiment),
            **_form_choices(), **extra}


def _result_context(experiment) -> dict:
    """The clean result, its figures and versions, follow-ups (blueprints/results.py)."""
    from services import follow_ups, results
    return {**results.page_context(experiment), "children": follow_ups.children(experiment),
            "result_error": None, "draft_html": None, "draft_title": None, "preview_error": None,
            "preview_url": None, "preview_report": None, "promote_error": None, "figure_error": None,
            "follow_up_error": None, "follow_up_form": None}


@bp.get("/experiments/<int:number>")
@access.owner
def detail(number: int):
    """One experiment: record, status and turn, timeline."""
    experiment = experiments.get_experiment(number)
    return render_template("experiments/detail.html", **_detail_context(experiment))


@bp.get("/experiments/<int:number>/timeline")
@access.owner
def timeline(number: int):
    """A page of the timeline (older events), as a fragment or inside the full page."""
    experiment = experiments.get_experiment(number)
    page = events.timeline(experiment, before=request.args.get("before") or None,
                           limit=current_app.config["TIMELINE_PAGE_SIZE"], **_timeline_filters())
    return render("experiments/detail.html", "experiments/_timeline_rows.html",
                  **_detail_context(experiment, timeline=page))


def _move(number: int, *, override: bool):
    """A status move from the page (`override`: the owner's explicit override, note required).
    Refusals are shown next to the control; an htmx swap gets the status panel only."""
    experiment = experiments.get_experiment(number)
    error_key = "override_error" if override else "status_error"
    try:
        effects = lifecycle.transition(
            experiment, request.form.get("to", ""), access.actor(), note=request.form.get("note"),
            override=override, expected_status=request.form.get("expected") or None)
    except SaganError as exc:
        db.session.rollback()
        return _status_response(experiments.get_experiment(number), **{error_key: exc.message})
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return _status_response(experiment, headers={"HX-Trigger": "pipeline-changed"})


def _status_response(experiment, headers: dict | None = None, **extra):
    """The status panel for a swap (what `_status.html` needs, not the whole page's context),
    or the whole page without JavaScript."""
    if is_fragment_request():
        context = {"experiment": experiment, "moves": lifecycle.allowed_moves(experiment, "owner"),
                   "timeline": events.timeline(experiment, limit=current_app.config["TIMELINE_PAGE_SIZE"]),
                   "status_error": None, "override_error": None, **extra}
    else:
        context = _detail_context(experiment, **extra)
    return render("experiments/detail.html", "experiments/_status.html", headers=headers, **context)


@bp.post("/experiments/<int:number>/status")
@access.owner
def change_status(number: int):
    """Move the experiment from its page."""
    return _move(number, override=False)


@bp.post("/experiments/<int:number>/edit")
@access.owner
def edit(number: int):
    """Save edited record fields."""
    experiment = experiments.get_experiment(number)
    data = {name: request.form[name] for name in EDIT_FIELDS if name in request.form}
    try:
        experiments.update_experiment(experiment, data, access.actor())
    except ValidationError as exc:
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        return render_template("experiments/detail.html",
                               **_detail_context(experiment, edit_error=exc))
    db.session.commit()
    return redirect(url_for("experiments.detail", number=number), code=303)


@bp.post("/experiments/<int:number>/plan")
@access.owner
def submit_plan(number: int):
    """The owner pastes a plan; a valid one opens an approval request."""
    experiment = experiments.get_experiment(number)
    text = request.form.get("markdown", "")
    try:
        submission = approvals.submit_plan(experiment, text, access.actor(), source="owner")
    except SaganError as exc:
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        return render_template("experiments/detail.html",
                               **_detail_context(experiment, plan_error=exc.message, plan_text=text))
    db.session.commit()
    lifecycle.run_side_effects(submission.effects)
    if submission.approval is None:
        return render_template("experiments/detail.html", **_detail_context(
            experiment, plan_error=f"Plan v{submission.plan_version.version} was saved, but its runpod-spec "
                                   "is invalid, so no approval was requested. Fix it and submit again.",
            plan_text=text))
    return redirect(url_for("approvals.detail", request_id=submission.approval.id), code=303)


@bp.post("/experiments/<int:number>/answers")
@access.owner
def answer_questions(number: int):
    """The owner answers the planner's questions; the planner is re-dispatched."""
    experiment = experiments.get_experiment(number)
    answers = {key[len("answer-"):]: value for key, value in request.form.items() if key.startswith("answer-")}
    try:
        effects = questions.answer(experiment, answers, access.actor(),
                                   expected_status=request.form.get("expected") or None)
    except SaganError as exc:
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        return render_template("experiments/detail.html",
                               **_detail_context(experiment, answer_error=exc.message, answers=answers))
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return redirect(url_for("experiments.detail", number=number), code=303)


@bp.post("/experiments/<int:number>/override")
@access.owner
def override_status(number: int):
    """The owner's explicit override: any status, with a required note, recorded as such."""
    return _move(number, override=True)
