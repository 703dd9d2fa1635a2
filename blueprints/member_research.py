"""A collaborator's search, compare, chart data and artifacts within one of their projects
(SPEC §13), under /m/<slug>/…. The owner's views read the whole instance; these ask
services/research/member_reads.py, which looks only inside the project, so another
project's experiment — by number, uuid, compare pair, chart or artifact name — answers the
same 404 as one that does not exist. Only promoted results are read: their charts hold the
runs they were promoted with, their files what was stored by then."""
from __future__ import annotations

from flask import Blueprint, abort, render_template, request
from flask_login import current_user

from blueprints import access
from blueprints.metrics import chart_json
from blueprints.pods import artifact_download
from services.core import permissions
from services.core.errors import NotFound, ValidationError
from services.research import member_reads, projects
from services.workflow import experiments, runs
from services.results.result_lint import confidence_of, title_without_confidence

bp = Blueprint("member_research", __name__)


def _project(slug: str, action: str):
    project = projects.find(slug)
    if project is None or not permissions.can(current_user._get_current_object(), action, project):
        abort(404)
    return project


def _promoted(slug: str, number: int):
    """The project and experiment `number`'s (experiment, promotion), or 404."""
    found = _project(slug, "read_experiment")
    pair = member_reads.promoted(found.id, number)
    if pair is None or not permissions.can(current_user._get_current_object(), "read_experiment", pair[0]):
        abort(404)
    return found, pair


@bp.get("/m/<slug>/search")
@access.allow("read_experiment")
def search(slug: str):
    """The project's experiments, promoted results and papers matching `q`."""
    found = _project(slug, "read_experiment")
    query = request.args.get("q", "")
    try:
        matches, error, status = member_reads.search(found.id, query), None, 200
    except ValidationError as exc:
        matches, error, status = member_reads.Found([], [], []), exc.message, 400
    return render_template("member_pages/search.html", project=found, query=query[:member_reads.MAX_QUERY],
                           found=matches, error=error, title_of=title_without_confidence,
                           confidence_of=confidence_of), status


@bp.get("/m/<slug>/compare")
@access.allow("read_experiment")
def compare(slug: str):
    """Promoted results of the project side by side (`?e=12&e=15`): title, confidence and each
    metric's latest value over the runs the result was promoted with. Never costs."""
    found = _project(slug, "read_experiment")
    page = {"project": found, "title_of": title_without_confidence, "confidence_of": confidence_of}
    try:
        numbers = member_reads.compare_numbers(request.args.getlist("e"))
    except ValidationError as exc:
        return render_template("member_pages/compare.html", compared=[], chosen=[], error=exc.message,
                               offered=member_reads.promoted_list(found.id), **page), 400
    pairs = member_reads.promoted_many(found.id, numbers)
    if pairs is None:
        abort(404)
    return render_template("member_pages/compare.html", compared=pairs, chosen=numbers, error=None,
                           offered=member_reads.promoted_list(found.id), **page, **member_reads.compare(pairs))


@bp.get("/m/<slug>/experiments/<int:number>/metrics/data")
@access.allow("read_experiment")
def chart_data(slug: str, number: int):
    """One metric's chart data (`?name=`) of a promoted result, the runs it was promoted with."""
    _, (experiment, promotion) = _promoted(slug, number)
    return chart_json(experiment, request.args.get("name"), pods_until=promotion.promoted_at)


@bp.get("/m/<slug>/experiments/<int:number>/artifacts/<path:name>")
@access.allow("read_experiment")
def artifact(slug: str, number: int, name: str):
    """A file a promoted result's runs stored by its promotion, downloaded (never inline)."""
    _, (experiment, promotion) = _promoted(slug, number)
    row = member_reads.artifact(experiment, promotion, name)
    if row is None:
        abort(404)
    return artifact_download(row)


# How much of a run's transcript one page shows (the newest events; the owner's run page pages back).
RUN_EVENTS_SHOWN = 300


def _shared_logs_experiment(slug: str, number: int):
    """The project and experiment `number` if the owner shared its agent logs, else 404 — the
    same as for another project's experiment or none at all."""
    found = _project(slug, "read_shared_agent_logs")
    try:
        record = experiments.get_experiment(number)
    except NotFound:
        abort(404)
    if (record.project_id != found.id or not record.agent_logs_shared
            or not permissions.can(current_user._get_current_object(), "read_shared_agent_logs", record)):
        abort(404)
    return found, record


@bp.get("/m/<slug>/experiments/<int:number>/runs/<run_id>")
@access.allow("read_shared_agent_logs")
def run(slug: str, number: int, run_id: str):
    """One agent run of an experiment whose logs the owner shared: its transcript, read-only
    (no cancel, no classification, no costs)."""
    found, record = _shared_logs_experiment(slug, number)
    try:
        row = runs.get_run(run_id)
    except (NotFound, ValueError):
        abort(404)
    if row.scope_kind != "experiment" or row.scope_id != record.id:
        abort(404)
    return render_template("member_pages/run.html", project=found, experiment=record, run=row,
                           events=runs.latest_events(row.id, RUN_EVENTS_SHOWN), shown=RUN_EVENTS_SHOWN)
