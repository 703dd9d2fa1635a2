"""The experiment page's panels, each declared once: what it shows (its context), the tables
whose rows it shows (what the live poll's fingerprint watches), and — for a panel the page
lists rather than places — its template.

The fingerprint is built from these declarations and nothing else (services/workflow/experiments.py's
`watch_page`), so a panel whose tables are declared here refreshes on the live page when they
change, and a panel cannot be added that the poll forgets. Panels the page places by hand
(templates/experiments/_live.html has the layout) leave `template` empty; a panel with a
template is drawn in the main column's list of panels, in declaration order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sqlalchemy as sa

from models import (
    AgentRun,
    ApprovalRequest,
    Artifact,
    CleanResultVersion,
    CodeCommit,
    Comment,
    Experiment,
    Figure,
    PlanVersion,
    Pod,
)
from services.code import code_view
from services.dispatch import cost_ledger, metrics
from services.dispatch import view as pod_view
from services.planning import follow_ups
from models.research import BeliefProposal, RecordLink
from services.research import beliefs, links
from services.results import results
from services.workflow import experiments
from services.workflow.experiments import PageWatch

_child = sa.orm.aliased(Experiment)


@dataclass(frozen=True)
class Panel:
    key: str
    watches: tuple[PageWatch, ...] = ()
    context: Callable[[Experiment], dict] | None = None
    template: str | None = None


def _pods(experiment: Experiment) -> dict:
    return {"pod_cards": pod_view.pods_for(experiment), "pod_dispatch": pod_view.live_dispatch(experiment),
            "pod_can_dispatch": pod_view.can_dispatch(experiment)}


PANELS: list[Panel] = [
    Panel("pods", (PageWatch(Pod.updated_at, lambda e: Pod.experiment_id == e, moved_by_progress=True),),
          context=_pods),
    Panel("runs", (PageWatch(AgentRun.updated_at,
                             lambda e: sa.and_(AgentRun.scope_kind == "experiment", AgentRun.scope_id == e)),)),
    Panel("plan", (PageWatch(ApprovalRequest.updated_at, lambda e: ApprovalRequest.experiment_id == e),
                   PageWatch(PlanVersion.updated_at, lambda e: PlanVersion.experiment_id == e))),
    Panel("result", (PageWatch(CleanResultVersion.created_at, lambda e: CleanResultVersion.experiment_id == e),
                     PageWatch(Figure.updated_at, lambda e: Figure.experiment_id == e)),
          context=results.page_context),
    Panel("artifacts", (PageWatch(Artifact.updated_at, lambda e: Artifact.experiment_id == e),),
          context=lambda experiment: {"artifact_views": pod_view.artifacts_for(experiment)}),
    Panel("code", (PageWatch(CodeCommit.created_at, lambda e: CodeCommit.experiment_id == e),),
          context=code_view.page_context),
    Panel("discussion", (PageWatch(Comment.updated_at,
                                   lambda e: sa.and_(Comment.entity_kind == "experiment", Comment.entity_id == e)),)),
    Panel("follow_ups", (PageWatch(_child.updated_at, lambda e: _child.parent_experiment_id == e),),
          context=lambda experiment: {"children": follow_ups.children(experiment)}),
    Panel("belief_proposals", (PageWatch(BeliefProposal.updated_at, lambda e: BeliefProposal.experiment_id == e),),
          context=lambda experiment: {"belief_proposals": beliefs.pending_proposals(experiment)},
          template="beliefs/_experiment_proposals.html"),
    # The experiment's links and its clean result's (a clean result's id is its experiment's).
    # Plain equalities, not IN: the poll's statement is compiled once for the lean connection,
    # which an expanding IN parameter does not survive.
    Panel("links", (PageWatch(RecordLink.updated_at, lambda e: sa.or_(*(
        sa.and_(kind_column == kind, id_column == e)
        for kind_column, id_column in ((RecordLink.source_kind, RecordLink.source_id),
                                       (RecordLink.target_kind, RecordLink.target_id))
        for kind in ("experiment", "clean_result")))),),
          context=lambda experiment: {"link_panel": links.panel("experiment", experiment.id)},
          template="links/_experiment_panel.html"),
    # Charts poll their own data; the cost reads pods and runs, watched above.
    Panel("metrics", context=metrics.page_context),
    Panel("cost", context=cost_ledger.page_context),
]


def install() -> None:
    """Make the live poll watch every declared panel's tables (at start-up, and after `add`)."""
    experiments.watch_page(watch for panel in PANELS for watch in panel.watches)


def add(panel: Panel) -> None:
    """Declare one more panel: its context joins the page's, its tables the poll's."""
    if any(existing.key == panel.key for existing in PANELS):
        raise ValueError(f"A panel named {panel.key!r} is already declared.")
    PANELS.append(panel)
    install()


def remove(key: str) -> None:
    PANELS[:] = [panel for panel in PANELS if panel.key != key]
    install()


def context_for(experiment: Experiment) -> dict:
    """Every panel's context for the page, and the panels the page lists (those with a template)."""
    found: dict = {"listed_panels": [panel for panel in PANELS if panel.template]}
    for panel in PANELS:
        if panel.context is not None:
            found.update(panel.context(experiment))
    return found
