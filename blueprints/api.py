"""The JSON API (SPEC §9.2). This foundation has the registries and experiment reads;
the workflow-engine issue adds the rest."""
from __future__ import annotations

from flask import Blueprint, request

from blueprints import access
from models import db
from services import experiments, registry
from services.errors import ValidationError

bp = Blueprint("api", __name__, url_prefix="/api")


def experiment_json(experiment) -> dict:
    return {
        "id": str(experiment.id), "number": experiment.number, "title": experiment.title,
        "status": experiment.status, "turn": experiment.turn, "kind": experiment.kind,
        "priority": experiment.priority, "tags": experiment.tags,
        "hypothesis": experiment.hypothesis, "compute_size": experiment.compute_size,
        "created_at": experiment.created_at.isoformat(),
        "updated_at": experiment.updated_at.isoformat(),
    }


@bp.get("/statuses")
@access.api("read")
def statuses():
    """The status registry: names, turns, board columns, terminal flags."""
    return {"statuses": [{"name": s.name, "turn": s.turn, "column": s.column,
                          "terminal": s.terminal, "owner_turn": s.owner_turn}
                         for s in registry.STATUSES]}


@bp.get("/experiments")
@access.api("read")
def list_experiments():
    """Experiments, newest first; `status` filters, `limit` 1–200 (default 100)."""
    import sqlalchemy as sa
    from models import Experiment
    try:
        limit = int(request.args.get("limit", 100))
    except ValueError:
        raise ValidationError("limit must be a whole number from 1 to 200.", field="limit")
    if not 1 <= limit <= 200:
        raise ValidationError("limit must be a whole number from 1 to 200.", field="limit")
    query = sa.select(Experiment).order_by(Experiment.number.desc()).limit(limit)
    status = request.args.get("status")
    if status:
        if status not in registry.STATUS_BY_NAME:
            raise ValidationError(f"Unknown status {status!r}.", field="status")
        query = query.where(Experiment.status == status)
    return {"experiments": [experiment_json(e) for e in db.session.scalars(query)]}


@bp.get("/experiments/<ref>")
@access.api("read")
def get_experiment(ref: str):
    """One experiment by uuid or number."""
    return {"experiment": experiment_json(experiments.get_experiment(ref))}
