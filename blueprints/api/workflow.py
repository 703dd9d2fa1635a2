"""Workflow events of an experiment: post a marker or a status change, list the timeline."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, int_arg
from models import Experiment
from services.core import events
from services.workflow import experiments, markers

routes = Routes()


def event_page(experiment: Experiment, default_limit: int) -> dict:
    """One page of the experiment's events, newest first, filtered by the query arguments."""
    event_type = request.args.get("event_type") or None
    marker = request.args.get("marker") or None
    if marker:
        markers.check_marker(marker)
    page = events.timeline(
        experiment, limit=int_arg("events" if "events" in request.args else "limit", default_limit, 1, 500),
        before=request.args.get("before") or None, event_type=event_type, marker=marker,
        since=events.parse_since(request.args.get("since")))
    # events.event_json stays in services: the agents' list_events tool answers the same shape.
    return {"events": [events.event_json(e) for e in page.events], "nextCursor": page.next_cursor}


@routes.post("/experiments/<ref>/workflow-events")
@access.api("write")
def post_workflow_event(ref: str):
    """A marker (with review fields and optional next_status) or a status change."""
    experiment = experiments.get_experiment(ref)
    posted = markers.post_workflow_event(experiment, body_fields(markers.WORKFLOW_EVENT_FIELDS), access.actor())
    commit_then_run(posted.effects)
    if posted.event is None:
        return {"id": None, "ok": True, "status": experiment.status}
    return {"id": str(posted.event.id), "ok": True}, 201


@routes.get("/experiments/<ref>/events")
@access.api("read")
def list_events(ref: str):
    """Events newest first, filtered by event_type / marker / since, cursor-paged by `before`."""
    return event_page(experiments.get_experiment(ref), 100)
