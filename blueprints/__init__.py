"""HTTP layer: one blueprint per area, each named `bp`. Views are thin; they parse
input, call one service function and render."""
from __future__ import annotations

from flask import Flask

from front import security_headers


def register_blueprints(app: Flask) -> None:
    from blueprints import (_actions, access, api, approvals, auth, board, errors, experiment_panels, experiments,
                            filters, health, input_limits, metrics, pods, progress, projects, runs, settings,
                            tokens)

    experiment_panels.install()
    access.init_app(app)
    input_limits.init_app(app)
    _actions.init_app(app)
    filters.init_app(app)
    errors.init_app(app)
    security_headers.init_app(app)
    from blueprints import (beliefs, daily_log, discussion, ideation, library, links, member_pages, member_research,
                            members, results, reviews, share, todos, unsubscribe)
    results.init_app(app)
    discussion.init_app(app)
    share.init_app(app)
    beliefs.init_app(app)
    links.init_app(app)
    todos.init_app(app)
    ideation.init_app(app)
    for module in (results, discussion, share, beliefs, links, library, daily_log, reviews, todos, ideation,
                   unsubscribe, members, member_pages, member_research):
        app.register_blueprint(module.bp)
    from blueprints import today
    for module in (auth, today, board, experiments, metrics, approvals, runs, pods, settings, tokens, health, api,
                   progress, projects):
        app.register_blueprint(module.bp)
