"""The JSON API (SPEC §9.2): one module per resource, each with its serializers beside it.

Auth per route (blueprints.access): a bearer token with the listed scope, or the owner's
session (with CSRF). The actor is always the credential's. Errors are
`{"error": code, "message": sentence}` with the status codes of SPEC §9.2. Answers are
camelCase; a body may spell each field camelCase or snake_case (`_common.fields_of`), and a
renamed field's old name for now (answered with a `Deprecation` header and a warning).

    registries     GET /statuses, /markers
    experiments    /experiments: list, create, read, patch
    workflow       /experiments/<ref>/workflow-events, /experiments/<ref>/events
    approvals      /experiments/<ref>/plans, /experiments/<ref>/questions, /approvals/<id>/resolve
    runs           /runs, /runs/<id>, /runs/<id>/cancel, /runs/<id>/classification
    pods           /experiments/<ref>/launch-pods, /pods, /artifacts; /pods/<id>/stop, /artifacts/<id>
    results        /clean-results/<ref>, /experiments/<ref>/promote
    projects       /projects: list, create; /projects/<slug>: read, patch
    beliefs        /beliefs: list, create, read, patch; /beliefs/<ref>/proposals (accept/reject: the
                   owner's session only); /links: list by record, create, delete
    literature     /literature: list and search, read, create (fields or identifier), patch
    daily_log      /daily-log: the newest entries, one day's (?day=YYYY-MM-DD), write a day now
    todos          /todos: list, create, read, patch; /todos/<ref>/experiment (make it one)
    reviews        /reviews: list, draft (queued), read; /reviews/<ref>/versions (save), /reviews/<ref>/publish
    ideation       /ideas: list, start, read; /ideas/<ref>/answers, /ideas/<ref>/cards (add),
                   /ideas/<ref>/cards/<id>/promote
    member_api     /m/…: what members read and propose in their projects (their session or own token)
"""
from __future__ import annotations

from flask import Blueprint

from blueprints.api import (approvals, beliefs, daily_log, experiments, ideation, literature, member_api, pods, projects,
                             registries, results, reviews, runs, todos, workflow)
from blueprints.api._common import deprecation_notice

bp = Blueprint("api", __name__, url_prefix="/api")
bp.after_request(deprecation_notice)

for resource in (registries, experiments, workflow, approvals, runs, pods, results, projects, beliefs, literature,
                 daily_log, todos, reviews, ideation, member_api):
    resource.routes.register_on(bp)
