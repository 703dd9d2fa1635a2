"""Metric charts' data and the compare view (owner pages; the mentor's are in share.py)."""
from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request

from blueprints import access
from blueprints._htmx import unless_unchanged
from services.dispatch import cost_ledger, metrics
from services.workflow import experiments

bp = Blueprint("metrics", __name__)


def chart_json(experiment, name: str | None, *, pods_until=None):
    """The chart data as JSON behind an ETag from the series summary: a chart that polls
    while pods run gets a 304 for one small query when nothing new arrived. `pods_until`:
    only the runs of pods started by then (a share link's)."""
    return unless_unchanged(metrics.series_version(experiment, name, pods_until=pods_until),
                            lambda: jsonify(metrics.chart_data(experiment, name, pods_until=pods_until)),
                            "private, no-cache")


@bp.get("/experiments/<int:number>/metrics/data")
@access.owner
def chart_data(number: int):
    """One metric's downsampled series, every pod overlaid (static/js/metrics.js draws it)."""
    return chart_json(experiments.get_experiment(number), request.args.get("name"))


@bp.get("/experiments/compare")
@access.owner
def compare():
    """Several experiments side by side: key numbers and each metric's latest value."""
    chosen = metrics.experiments_to_compare(request.args.getlist("e"))
    return render_template("experiments/compare.html", compared=chosen,
                           ledgers=cost_ledger.ledgers_for(chosen), **metrics.compare(chosen))
