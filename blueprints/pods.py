"""Pods on the pages: dispatch an approved experiment, stop a pod, read its log, resolve a
fleet incident, and read an uploaded artifact."""
from __future__ import annotations

from flask import Blueprint, Response, redirect, request, url_for

from blueprints import access
from blueprints._actions import perform
from blueprints._htmx import render
from models import Artifact, FleetIncident, Pod, db
from services.core import input_shape
from services.core.errors import Conflict, SaganError
from services.core.records import get_by_id
from services.dispatch import pod_logs, provisioner, watcher
from services.workflow import experiments

bp = Blueprint("pods", __name__)


def _back(number: int, message: str | None = None, anchor: str = "pods"):
    target = url_for("experiments.detail", number=number, pod_message=message) + f"#{anchor}"
    return redirect(target, code=303)


@bp.post("/experiments/<int:number>/dispatch")
@access.owner
def dispatch(number: int):
    """The owner's Dispatch button: launch the approved spec (the message says why not if
    one is live). Once per form key: a reload or a second tap launches nothing more."""
    experiment = experiments.get_experiment(number)
    launched = {}

    def launch():
        launched["run"], effects = provisioner.launch(experiment, access.actor())
        return effects

    def done():
        if "run" not in launched:
            return _back(number)
        run = launched["run"]
        return _back(number, f"Dispatch {run.short_id} queued." if run else "Dispatch is gated; see the status.")

    return perform(launch, refused=lambda exc: _back(number, exc.message), done=done)


@bp.post("/pods/<pod_id>/stop")
@access.owner
def stop(pod_id: str):
    """Stop one pod (volume kept); the experiment is blocked with who stopped it."""
    pod = get_by_id(Pod, pod_id, "No such pod.")
    experiment = experiments.get_experiment(pod.experiment_id)
    return perform(lambda: watcher.stop_from_owner(pod, access.actor()),
                   refused=lambda exc: _back(experiment.number, exc.message),
                   done=lambda: _back(experiment.number, stop_message(pod)))


def stop_message(pod: Pod) -> str:
    if pod.status == "stopped":
        return f"{pod.name} stopped; volume preserved."
    # A pod on this host that the web may not signal: the local worker stops it (watcher.settle_local_pod).
    return f"{pod.name} is stopping: this host's local worker stops it. Volume preserved."


@bp.get("/pods/<pod_id>/logs")
@access.owner
def logs(pod_id: str):
    """The pod's log as the agents read it (read_pod_logs): provider, else the uploaded log."""
    pod = get_by_id(Pod, pod_id, "No such pod.")
    experiment = experiments.get_experiment(pod.experiment_id)
    raw_tail = request.args.get("tail", "").strip()
    error, log = None, None
    try:
        tail = int(raw_tail) if raw_tail else None
    except ValueError:
        tail, error = None, f"tail must be a whole number of lines from 1 to {pod_logs.MAX_TAIL}."
    if error is None:
        # Not an action (nothing changes, so not `perform`): the commit only ends the read
        # transaction, so none is held while the provider streams the log.
        db.session.commit()
        try:
            log = pod_logs.read_pod_logs(pod, tail=tail)
        except SaganError as exc:
            error = exc.message
    return render("pods/logs.html", "pods/_log.html", status=400 if error else 200,
                  pod=pod, experiment=experiment, log=log, error=error, tail=raw_tail)


@bp.post("/fleet-incidents/<incident_id>/resolve")
@access.owner
def resolve_incident(incident_id: str):
    """One click: automatic dispatch and recovery resume."""
    incident = get_by_id(FleetIncident, incident_id, "No such fleet incident.")

    def resolve():
        if incident.resolved_at is None:  # a second click (or another tab) changes nothing
            watcher.resolve_incident(incident, access.actor())

    return perform(resolve, done=lambda: redirect(
        request.referrer if (request.referrer or "").startswith(request.host_url) else url_for("board.index"),
        code=303))


@bp.get("/artifacts/<artifact_id>")
@access.owner
def artifact(artifact_id: str):
    """The raw file, downloaded (never rendered inline: SVG or HTML from a pod could run script)."""
    return artifact_download(get_by_id(Artifact, artifact_id, "No such artifact."))


def artifact_download(row: Artifact) -> Response:
    """An artifact as an attachment, inert even if a browser opened it (nosniff, sandbox CSP);
    a 409 while it is still being processed or when that failed (its content is not redacted)."""
    if row.status == "processing":
        raise Conflict(f"{row.name} is still being processed; download it in a minute.", code="artifact_processing")
    if not row.readable:
        raise Conflict(f"{row.name} cannot be downloaded. {row.status_note or ''}".strip(), code="artifact_failed")
    response = Response(row.content, mimetype=row.content_type)
    # RFC 6266: a name with quotes, `;` or non-Latin-1 characters broke the old header.
    response.headers["Content-Disposition"] = input_shape.content_disposition(row.name.rsplit("/", 1)[-1])
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
