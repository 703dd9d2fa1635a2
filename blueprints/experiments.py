"""Experiment pages: the table, the new-experiment form, one experiment's page and its poll."""
from __future__ import annotations

from flask import Blueprint, current_app, make_response, redirect, render_template, request, url_for

from blueprints import access, progress_holds
from blueprints._actions import perform, stash_for, take_stash
from blueprints._htmx import fragment_or_page, render, unless_unchanged
from blueprints.experiment_page import (
    ExperimentPage,
    PageError,
    back,
    form_choices,
    page_form,
    refuse,
    timeline_filters,
)
from services.core import events, registry
from services.core.errors import NotFound, ValidationError
from services.planning import approvals, questions
from services.research import projects
from services.workflow import experiments, lifecycle

bp = Blueprint("experiments", __name__)

FORM_FIELDS = ("title", "hypothesis", "kind", "priority", "compute_size", "tags", "project_id")
# The code pods run (SPEC §5.7): editable on the record, not on the new-experiment form.
EDIT_FIELDS = FORM_FIELDS + ("git_branch", "git_commit")


@bp.get("/experiments")
@access.owner
def index():
    """All experiments as a sortable, filterable table."""
    page, state = experiments.table(request.args)
    every_column = {key: value for key, value in state.items() if value and key != "column"}
    return render("experiments/index.html", "experiments/_table.html", page=page, state=state,
                  statuses=registry.STATUS_NAMES, column_titles=dict(registry.BOARD_COLUMNS),
                  every_column=every_column, **form_choices())


@bp.route("/experiments/new", methods=["GET", "POST"])
@access.owner
def new():
    """The new-experiment form. A refusal redirects back to the form with the message and
    what was typed (post/redirect/get, STYLE §8); the form's one-time key makes a double
    tap or a resent post create one experiment."""
    if request.method == "GET":
        stashed = take_stash("experiment:new")
        form = stashed.get("form") or {name: "" for name in FORM_FIELDS}
        if not stashed.get("form") and request.args.get("project"):
            # "New experiment in this project" from a project's page.
            chosen = projects.find(request.args["project"])
            form["project_id"] = str(chosen.id) if chosen else ""
        error = PageError(**stashed["error"]) if stashed.get("error") else None
        return render_template("experiments/new.html", form=form, error=error, **form_choices())
    form = {name: request.form.get(name, "") for name in FORM_FIELDS}
    created = {}

    def create():
        created["experiment"] = experiments.create_experiment(
            {k: v for k, v in form.items() if v != "" or k == "title"}, access.actor())

    def done():
        if "experiment" in created:
            return redirect(url_for("experiments.detail", number=created["experiment"].number), code=303)
        return redirect(url_for("experiments.index"), code=303)  # the repeat of a post that already created it

    def refused(exc):
        stash_for("experiment:new", {"form": form, "error": PageError(exc.message, exc.field).as_dict()})
        return redirect(url_for("experiments.new"), code=303)

    return perform(create, done=done, refused=refused)


@bp.get("/experiments/<int:number>")
@access.owner
def detail(number: int):
    """One experiment: stepper, status and turn, the result first when there is one, the
    rest in sections; it refreshes itself through `live` until the experiment ends."""
    experiment = experiments.get_experiment(number)
    page = ExperimentPage.for_request(experiment)
    html = progress_holds.rendered(number, page.context,
                                   lambda context: render_template("experiments/detail.html", **context))
    response = make_response(html)
    response.headers["Cache-Control"] = "no-store"  # a stashed refusal must not come back from the cache
    return response


@bp.post("/experiments/<int:number>/agent-logs-share")
@access.owner
def share_agent_logs(number: int):
    """Share this experiment's agent runs with its project's collaborators (`shared=1`), or
    stop (`shared=0`). Off by default; the page asks before either."""
    experiment = experiments.get_experiment(number)
    choice = request.form.get("shared", "")

    def change():
        if choice not in ("0", "1"):
            raise ValidationError("Choose shared=1 to share the agent logs or shared=0 to stop.", field="shared")
        if choice == "1" and experiment.project_id is None:
            raise ValidationError("This experiment is in no project, so it has no collaborators to share its "
                                  "agent logs with. File it in a project first.", field="shared")
        experiments.share_agent_logs(experiment, choice == "1", access.actor())

    return perform(change, done=lambda: redirect(url_for("experiments.detail", number=number) + "#runs", code=303))


@bp.get("/experiments/<int:number>/live")
@access.owner
def live(number: int):
    """The page's poll: 304 while nothing it shows changed since the version the page has,
    else the live panels afresh. The usual 304 is answered before Flask, in one query
    (front/quiet_polls.py); this view answers the rest (a session that needed the
    full check, a change, no such experiment). When only pods' progress posts moved the
    version, and the page's version was rendered here less than LIVE_PROGRESS_SECONDS ago,
    it stays 304 with the page's own version (`progress_holds`): a running experiment whose
    pods post re-rendered every panel at every poll."""
    poll = experiments.live_poll(number, None)
    if poll.version is None:
        raise NotFound(f"No experiment {number}.")
    held = progress_holds.held_version(number, request.if_none_match, poll.version)
    if held is not None:
        response = make_response("", 304)
        response.set_etag(held)
        response.headers["Cache-Control"] = "no-cache"
        return response

    def panels():
        page = ExperimentPage(experiments.get_experiment(number))
        return fragment_or_page(lambda: progress_holds.rendered(number, page.context, _render_live),
                                lambda: redirect(url_for("experiments.detail", number=number), code=303))

    return unless_unchanged(poll.version.version, panels)


def _render_live(context: dict) -> str:
    return render_template("experiments/_live.html", **context)


@bp.get("/experiments/<int:number>/timeline")
@access.owner
def timeline(number: int):
    """A page of the timeline (older events), as a fragment or inside the full page."""
    experiment = experiments.get_experiment(number)
    before = request.args.get("before") or None

    def rows():
        page = events.timeline(experiment, before=before, limit=current_app.config["TIMELINE_PAGE_SIZE"],
                               **timeline_filters())
        return render_template("experiments/_timeline_rows.html", experiment=experiment, timeline=page,
                               filters=timeline_filters())

    return fragment_or_page(rows, lambda: render_template(
        "experiments/detail.html", **ExperimentPage(experiment, timeline_before=before).context()))


def _move(number: int, *, override: bool):
    """A status move from the page (`override`: the owner's explicit override, note required).
    Refusals are shown next to the control. An htmx swap gets the page's whole live region,
    not the status panel alone: the stepper ("Next: …"), the timeline and the owner's next
    action show the status too, and a move must change them all in the same swap."""
    experiment = experiments.get_experiment(number)
    error_key = "override" if override else "status"
    chosen, note = request.form.get("to", ""), request.form.get("note") or ""
    # A refusal keeps what the owner chose in the form it came from (as the board does).
    kept = {"override_to": chosen, "override_note": note} if override else {"status_to": chosen, "status_note": note}

    def live_panels(errors: dict | None = None, headers: dict | None = None):
        current = experiments.get_experiment(number)
        drafts = kept if errors else {}
        return fragment_or_page(
            lambda: render_template("experiments/_live.html",
                                    **ExperimentPage(current, errors=errors or {}, drafts=drafts).context()),
            lambda: refuse(current, error_key, errors[error_key].message, **drafts) if errors
            else back(number, "status"),
            headers=headers)

    return perform(
        lambda: lifecycle.transition(experiment, chosen, access.actor(), note=note or None, override=override,
                                     expected_status=request.form.get("expected") or None),
        refused=lambda exc: live_panels({error_key: PageError(exc.message)}),
        done=lambda: live_panels(headers={"HX-Trigger": "pipeline-changed"}))


@bp.post("/experiments/<int:number>/status")
@access.owner
def change_status(number: int):
    """Move the experiment from its page."""
    return _move(number, override=False)


@bp.post("/experiments/<int:number>/override")
@access.owner
def override_status(number: int):
    """The owner's explicit override: any status, with a required note, recorded as such."""
    return _move(number, override=True)


@bp.post("/experiments/<int:number>/edit")
@access.owner
def edit(number: int):
    """Save edited record fields."""
    experiment = experiments.get_experiment(number)
    data = {name: request.form[name] for name in EDIT_FIELDS if name in request.form}
    return page_form(number, "edit", lambda: experiments.update_experiment(experiment, data, access.actor()))


@bp.post("/experiments/<int:number>/plan")
@access.owner
def submit_plan(number: int):
    """The owner pastes a plan; a valid one opens an approval request (and the page goes
    to it). One per form key: a second tap does not store a second version."""
    experiment = experiments.get_experiment(number)
    text = request.form.get("markdown", "")
    outcome = {}

    def submit():
        outcome["submission"] = approvals.submit_plan(experiment, text, access.actor(), source="owner")
        return outcome["submission"].effects

    def done():
        submission = outcome.get("submission")
        if submission is None:
            return back(number, "plan")
        if submission.approval is None:
            return refuse(experiment, "plan", f"Plan v{submission.plan_version.version} was saved, but its "
                          "runpod-spec is invalid, so no approval was requested. Fix it and submit again.",
                          plan_text=text)
        return redirect(url_for("approvals.detail", request_id=submission.approval.id), code=303)

    return perform(submit, done=done,
                   refused=lambda exc: refuse(experiments.get_experiment(number), "plan", exc, plan_text=text))


@bp.post("/experiments/<int:number>/answers")
@access.owner
def answer_questions(number: int):
    """The owner answers the planner's questions; the planner is re-dispatched."""
    experiment = experiments.get_experiment(number)
    answers = {key[len("answer-"):]: value for key, value in request.form.items() if key.startswith("answer-")}
    return page_form(number, "answer", lambda: questions.answer(experiment, answers, access.actor(),
                                                                expected_status=request.form.get("expected") or None),
                     anchor="answered-questions", answers=answers)
