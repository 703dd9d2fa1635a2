"""What a collaborator reads across one of their projects (SPEC §13): a search over its
experiments, promoted results and papers, two or more promoted results side by side, and the
chart data and artifacts those results were promoted with.

Every function takes the project and looks only inside it: a record of another project is
never found, so the views answer it as one that does not exist (404). What a result shows is
what was promoted: the runs of pods started by its promotion and the artifacts stored by then
(a rerun after it is the owner's, not yet the collaborator's)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import Artifact, Experiment, PromotedResult, db
from services.core.errors import ValidationError
from services.dispatch import metrics
from services.research import literature

MAX_QUERY = 200
SEARCH_LIMIT = 50


@dataclass
class Found:
    experiments: list          # Experiment rows whose title, hypothesis or number match
    results: list              # (Experiment, PromotedResult) whose promoted title matches
    papers: list               # LiteratureItem rows of the project matching the text


def search(project_id: uuid.UUID, query: str) -> Found:
    """The project's experiments, promoted results and papers matching `query` (a word of the
    title, `#12`, or an experiment's uuid); three statements whatever the project's size."""
    text = (query or "").strip()
    if len(text) > MAX_QUERY:
        raise ValidationError(f"A search is at most {MAX_QUERY} characters.", field="q")
    if not text:
        return Found([], [], [])
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    matches = [Experiment.title.ilike(pattern, escape="\\"), Experiment.hypothesis.ilike(pattern, escape="\\")]
    reference = text.lstrip("#")
    if reference.isdigit() and int(reference) < 2**31:
        matches.append(Experiment.number == int(reference))
    else:
        try:
            matches.append(Experiment.id == uuid.UUID(reference))
        except ValueError:
            pass
    experiments = list(db.session.scalars(
        sa.select(Experiment).where(Experiment.project_id == project_id, sa.or_(*matches))
        .order_by(Experiment.number.desc()).limit(SEARCH_LIMIT)))
    results = [tuple(row) for row in db.session.execute(
        sa.select(Experiment, PromotedResult).join(PromotedResult, PromotedResult.experiment_id == Experiment.id)
        .where(Experiment.project_id == project_id, PromotedResult.title.ilike(pattern, escape="\\"))
        .order_by(PromotedResult.promoted_at.desc()).limit(SEARCH_LIMIT))]
    papers = literature.search(literature.Filters(query=text, project_id=project_id), limit=SEARCH_LIMIT) \
        if len(text) <= literature.MAX_SEARCH else []
    return Found(experiments, results, papers)


def promoted(project_id: uuid.UUID, number: int) -> tuple[Experiment, PromotedResult] | None:
    """Experiment `number` of the project with its promoted result; None outside the project,
    without a promotion, or for no such number."""
    if number >= 2**31:
        return None
    row = db.session.execute(
        sa.select(Experiment, PromotedResult).join(PromotedResult, PromotedResult.experiment_id == Experiment.id)
        .where(Experiment.project_id == project_id, Experiment.number == number)).first()
    return tuple(row) if row else None


def compare_numbers(raw: list[str]) -> list[int]:
    """`?e=12&e=15` (or `e=12,15`) as numbers, in order; a malformed value is a 400 (a number
    that names nothing the collaborator reads is the view's 404)."""
    numbers: list[int] = []
    for value in raw:
        for part in value.replace(",", " ").split():
            text = part.strip().lstrip("#")
            if not text.isdigit() or int(text) >= 2**31:
                raise ValidationError(f"{part[:20]!r} is not an experiment number.", field="e")
            if int(text) not in numbers:
                numbers.append(int(text))
    if len(numbers) > metrics.COMPARE_MAX:
        raise ValidationError(f"{len(numbers)} experiments chosen; compare at most {metrics.COMPARE_MAX} at once.",
                              field="e")
    return numbers


def promoted_many(project_id: uuid.UUID, numbers: list[int]) -> list[tuple[Experiment, PromotedResult]] | None:
    """Each numbered experiment of the project with its promoted result, in the given order;
    None when any of them is outside the project, unpromoted or missing (one statement)."""
    rows = {experiment.number: (experiment, promotion) for experiment, promotion in db.session.execute(
        sa.select(Experiment, PromotedResult).join(PromotedResult, PromotedResult.experiment_id == Experiment.id)
        .where(Experiment.project_id == project_id, Experiment.number.in_(numbers)))}
    if len(rows) != len(numbers):
        return None
    return [rows[n] for n in numbers]


def promoted_list(project_id: uuid.UUID, limit: int = 100) -> list[tuple[Experiment, PromotedResult]]:
    """The project's promoted results, newest promotion first (what the compare form offers)."""
    return [tuple(row) for row in db.session.execute(
        sa.select(Experiment, PromotedResult).join(PromotedResult, PromotedResult.experiment_id == Experiment.id)
        .where(Experiment.project_id == project_id).order_by(PromotedResult.promoted_at.desc()).limit(limit))]


def compare(pairs: list[tuple[Experiment, PromotedResult]]) -> dict:
    """The compare table of promoted results: each metric's latest value over the runs each
    result was promoted with (one statement per result: at most COMPARE_MAX)."""
    cells: dict = {}
    columns: list[str] = []
    for experiment, promotion in pairs:
        found = metrics.summaries_for([experiment.id], pods_until=promotion.promoted_at).get(experiment.id, {})
        cells[experiment.id] = found
        columns += [name for name in found if name not in columns]
    return {"metric_columns": [{"name": n, "label": metrics.label_of(n), "unit": metrics.unit_of(n)}
                               for n in columns[:metrics.CHARTS_MAX]],
            "metric_cells": cells}


def _promoted_artifacts(experiment: Experiment, promotion: PromotedResult):
    return (sa.select(Artifact).where(Artifact.experiment_id == experiment.id, Artifact.status == "ready",
                                      Artifact.created_at <= promotion.promoted_at))


def artifact_names(experiment: Experiment, promotion: PromotedResult) -> list[str]:
    """The names of the artifacts stored by the result's promotion (content not loaded)."""
    query = _promoted_artifacts(experiment, promotion).with_only_columns(Artifact.name).distinct() \
        .order_by(Artifact.name).limit(200)
    return list(db.session.scalars(query))


def artifact(experiment: Experiment, promotion: PromotedResult, name: str) -> Artifact | None:
    """The newest ready artifact called `name` stored by the promotion; None otherwise."""
    return db.session.scalar(_promoted_artifacts(experiment, promotion).where(Artifact.name == name)
                             .order_by(Artifact.created_at.desc()).limit(1))
