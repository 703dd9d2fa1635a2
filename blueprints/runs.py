"""Run pages: the runs list, one run's page with its live events, and Cancel (SPEC §5.3, §9.3).

Live events follow ARCHITECTURE §4 "Events and polling": the page asks
`/runs/<id>/events?after=<seq>` for what is new, nothing new is a bodiless 204, and the
fragment for an ended run carries no poll element, so polling stops by itself. Why the
poll element uses an `every` trigger rather than `load delay`: see
templates/runs/_poll_element.html.
"""
from __future__ import annotations

import json
import re
import uuid

from flask import Blueprint, current_app, make_response, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform
from blueprints._htmx import fragment_or_page, render
from front import quiet_polls
from models import AgentRun, Experiment, db
from services.core import registry
from services.core.errors import NotFound, ValidationError
from services.dispatch.recovery import split_recovery_request
from services.workflow import experiments
from services.workflow import runs as run_service

bp = Blueprint("runs", __name__)

FIRST_PAGE = 200      # events on a run page's first render, and per "show earlier"
POLL_BATCH = 500      # events per poll answer; a longer backlog arrives over several polls
CHILD_EVENTS = 50     # events shown per child run (its own page has the rest)
LIST_LIMIT = 100      # rows on /runs
_SEQ = re.compile(r"[0-9]{1,18}")


# --- template helpers -----------------------------------------------------------------

@bp.app_template_filter("event_category")
def event_category(event_type: str) -> str:
    """`tools` for tool traffic and pod/deploy plumbing, `agent` for the agent's own steps."""
    if event_type in ("tool_call", "tool_result", "artifact_uploaded") \
            or event_type.startswith(("deploy_", "pod_")):
        return "tools"
    return "agent"


@bp.app_template_filter("pretty_json")
def pretty_json(value) -> str:
    """Indented JSON as plain text (autoescaped by Jinja, unlike `tojson`'s \\u003c forms)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@bp.app_template_filter("run_cost")
def run_cost(value) -> str:
    """An agent run's cost: "price unknown" for an unpriced model, and cents' fractions
    kept (a cached call costs less than a cent, which is not $0.00)."""
    if value is None:
        return "price unknown"
    if 0 < value < 0.01:
        return f"${value:.4f}"
    return f"${value:,.2f}"


SHOWN_METADATA = {"tool", "input", "is_error", "truncated_from", "thinking"}  # the event row shows these itself


@bp.app_template_filter("extra_metadata")
def extra_metadata(metadata: dict) -> dict:
    """The metadata an event row does not already show, for its "Details" block."""
    return {k: v for k, v in (metadata or {}).items() if k not in SHOWN_METADATA}


@bp.app_template_global("experiment_runs")
def experiment_runs(experiment) -> list[AgentRun]:
    """An experiment's runs, newest first, for its page's runs section."""
    return run_service.runs_for_experiment(experiment.id)


@bp.app_template_global("run_tree")
def run_tree(rows: list[AgentRun]) -> list[tuple[AgentRun, int]]:
    return run_service.as_tree(rows)


@bp.app_template_global("run_checks")
def run_checks(rows: list[AgentRun]) -> dict:
    """The preflight and completion-audit verdicts of the runs in a tree, by run id."""
    return run_service.checks_of(run.id for run in rows)


def _seq_arg(name: str) -> int | None:
    """A cursor from the query string: a non-negative whole number, or a clear 400."""
    raw = request.args.get(name)
    if raw is None:
        return None
    if not _SEQ.fullmatch(raw):
        raise ValidationError(f"{name} must be an event number (a whole number, 0 or more); got {raw[:40]!r}.",
                              field=name)
    return int(raw)


def _run_uuid(run_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(run_id)
    except ValueError:
        raise NotFound("No such run.") from None


# --- contexts -------------------------------------------------------------------------

def _header_context(run: AgentRun, **extra) -> dict:
    """What the header fragment needs (it refreshes alone when the run changes)."""
    experiment = None
    if run.scope_kind == "experiment" and run.scope_id:
        experiment = db.session.get(Experiment, run.scope_id)
    return {"run": run, "experiment": experiment, "latest_event_at": run_service.latest_event_at(run.id),
            "cancel_error": None, "classify_error": None, "classifications": registry.RUN_CLASSIFICATIONS, **extra}


def _page_context(run: AgentRun, *, before: int | None = None, **extra) -> dict:
    """The whole run page. `before` shows an older window of events instead of the latest."""
    if before is None:
        window = run_service.latest_events(run.id, FIRST_PAGE + 1)
    else:
        window = run_service.events_before(run.id, before, FIRST_PAGE + 1)
    has_earlier = len(window) > FIRST_PAGE
    window = window[-FIRST_PAGE:]
    child_runs = run_service.children(run)
    child_events = run_service.latest_events_of([child.id for child in child_runs], CHILD_EVENTS)
    recoveries = run_service.recoveries_of(run)
    pods = run_service.pods_of(run)
    context = _header_context(run, **extra)
    context.update({
        "events": window, "has_earlier": has_earlier, "older_window": before is not None,
        "cursor": window[-1].seq if window else 0,
        # An older window is history: it links back to the latest events instead of polling.
        "keep_polling": not run.terminal and before is None,
        "request_parts": split_recovery_request(run.request),
        "recoveries": recoveries, "children": child_runs, "child_events": child_events, "pods": pods,
    })
    return context


def _page(run: AgentRun, **extra) -> str:
    """The full run page."""
    return render_template("runs/detail.html", **_page_context(run, **extra))


# --- views ----------------------------------------------------------------------------

@bp.get("/runs")
@access.owner
def index():
    """All runs, newest first, filterable by status, kind, classification and experiment.

    An unknown classification is refused (400, naming the choices) rather than ignored: a
    spend report's "unclassified runs" link that silently listed every run would mislead."""
    status = request.args.get("status", "")
    kind = request.args.get("kind", "")
    status = status if status in registry.RUN_STATUSES else ""
    kind = kind if kind in registry.RUN_KINDS else ""
    classification = request.args.get("classification", "").strip()
    experiment_ref = request.args.get("experiment", "").strip()
    experiment = experiments.get_experiment(experiment_ref) if experiment_ref else None
    run_list = run_service.list_runs(status=status, kind=kind, classification=classification, limit=LIST_LIMIT,
                                     experiment_id=experiment.id if experiment is not None else None)
    filters = {"status": status, "kind": kind, "classification": classification,
               "experiment": experiment.number if experiment is not None else ""}
    return render("runs/index.html", "runs/_table.html", runs=run_list, numbers=run_service.experiment_numbers(run_list),
                  filters=filters, experiment=experiment, limit=LIST_LIMIT,
                  statuses=registry.RUN_STATUSES, kinds=registry.RUN_KINDS,
                  classifications=registry.RUN_CLASSIFICATIONS)


@bp.get("/runs/<run_id>")
@access.owner
def detail(run_id: str):
    """One run: header, request, resume history, plan, child runs, pods, events, discussion."""
    run = run_service.get_run(run_id)
    # `Vary` as on the run's fragment URLs: a cache keeps the page and the swaps apart.
    return fragment_or_page(lambda: _page(run), lambda: _page(run))


@bp.get("/runs/<run_id>/header")
@access.owner
def header(run_id: str):
    """The header alone (status, counts, Cancel); it refreshes on `run-changed`."""
    run = run_service.get_run(run_id)
    return fragment_or_page(lambda: render_template("runs/_header.html", **_header_context(run)),
                            lambda: _page(run))


@bp.get("/runs/<run_id>/events")
@access.owner
def events(run_id: str):
    """Events after a seq (the live poll) or before one ("show earlier").

    Poll answers: 204 and no body when nothing is new and the run is active; the new rows
    plus a fresh poll element when something is; the last rows and no poll element once
    the run has ended. The usual 204 is answered before Flask, in one query — the run's
    status and last seq with the session's check beside it (front/quiet_polls.py);
    otherwise at most three whatever the run's size: that read (or the view's own), the
    session's user, and the new events (skipped when there are none).
    """
    after, before = _seq_arg("after"), _seq_arg("before")
    if (after is None) == (before is None):
        raise ValidationError("Ask for events with after=<seq> (newer ones) or before=<seq> (earlier ones).",
                              field="after")
    # A reload or a no-JS click gets the page itself (an older window for "show earlier").
    return fragment_or_page(lambda: _events_fragment(run_id, after, before),
                            lambda: _page(run_service.get_run(run_id), before=before))


def _events_fragment(run_id: str, after: int | None, before: int | None):
    if before is not None:
        run = run_service.get_run(run_id)
        window = run_service.events_before(run.id, before, FIRST_PAGE + 1)
        has_earlier = len(window) > FIRST_PAGE
        return render_template("runs/_earlier.html", run=run, events=window[-FIRST_PAGE:], has_earlier=has_earlier)
    run_uuid = _run_uuid(run_id)
    state = quiet_polls.read_run_state(request.environ, run_uuid) or run_service.poll_state(run_uuid)
    if state is None:
        raise NotFound("No such run.")
    active = state.status not in registry.RUN_TERMINAL_STATUSES
    if active and after >= state.last_seq:
        return current_app.response_class(status=204)
    new = run_service.events_after(run_uuid, after, POLL_BATCH) if after < state.last_seq else []
    backlog = len(new) == POLL_BATCH
    response = make_response(render_template(
        "runs/_poll.html", run_id=run_uuid, run_status=state.status, events=new,
        cursor=new[-1].seq if new else after, keep_polling=active or backlog))
    # The header (status, "N events · latest …") refreshes itself on this event.
    response.headers["HX-Trigger"] = "run-changed"
    return response


@bp.post("/runs/<run_id>/cancel")
@access.owner
def cancel(run_id: str):
    """Cancel a run: queued/waiting runs stop now, running ones between steps (SPEC §5.3)."""
    run = run_service.get_run(run_id)

    def refused(exc):
        current = run_service.get_run(run_id)
        # 200 with the sentence next to the button (STYLE §8): htmx swaps no 4xx.
        return fragment_or_page(
            lambda: render_template("runs/_header.html", **_header_context(current, cancel_error=exc.message)),
            lambda: _page(current, cancel_error=exc.message))

    def done():
        current = run_service.get_run(run_id)
        return fragment_or_page(
            lambda: render_template("runs/_header.html", oob_your_turn=True, **_header_context(current)),
            lambda: redirect(url_for("runs.detail", run_id=current.id), code=303))

    return perform(lambda: run_service.cancel_run(run, access.actor()), refused=refused, done=done)


@bp.post("/runs/<run_id>/classification")
@access.owner
def classify(run_id: str):
    """The owner sets whether the run was worth its cost (SPEC §12.3); a bad value is said
    next to the choice and changes nothing."""
    run = run_service.get_run(run_id)

    def refused(exc):
        current = run_service.get_run(run_id)
        return fragment_or_page(
            lambda: render_template("runs/_header.html", **_header_context(current, classify_error=exc.message)),
            lambda: _page(current, classify_error=exc.message))

    def done():
        current = run_service.get_run(run_id)
        return fragment_or_page(lambda: render_template("runs/_header.html", **_header_context(current)),
                                lambda: redirect(url_for("runs.detail", run_id=current.id), code=303))

    return perform(lambda: run_service.classify(run, request.form.get("classification"), "owner"),
                   refused=refused, done=done, keyed=False)
