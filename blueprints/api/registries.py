"""The registries a client needs to speak the workflow: statuses, markers, review vocabulary."""
from __future__ import annotations

from blueprints import access
from blueprints.api._common import Routes
from services.core import registry

routes = Routes()


@routes.get("/statuses")
@access.api("read")
def statuses():
    """The status registry: names, turns, board columns, terminal flags."""
    return {"statuses": [{"name": s.name, "turn": s.turn, "column": s.column,
                          "terminal": s.terminal, "owner_turn": s.owner_turn}
                         for s in registry.STATUSES]}


@routes.get("/markers")
@access.api("read")
def marker_registry():
    """The marker registry and the review vocabulary."""
    return {"markers": registry.MARKERS, "reviewPairs": registry.REVIEW_PAIRS,
            "verdicts": registry.REVIEW_VERDICTS, "maxRounds": registry.REVIEW_MAX_ROUNDS}
