"""Projects (SPEC §11.1): creating and editing them, their status, and what a project's page
and its share link show.

A project is found by its slug (`/p/<slug>`), which the owner may edit; its uuid is what
records carry (`project_id`), so renaming a slug breaks no link between records. Projects
are archived, never deleted.
"""
from __future__ import annotations

import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import sqlalchemy as sa
from flask import current_app

from models import CleanResultVersion, Experiment, db
from models.literature import LiteratureItem
from models.research import Belief, BeliefVersion, Project, RecordLink
from services.core import input_shape, registry
from services.core.actors import Actor
from services.core.errors import NotFound, ValidationError
from services.core.redact import redact
from services.core.sanitize import render_markdown
from services.results.result_lint import confidence_of, title_without_confidence
from services.results.results import excerpt

SLUG_MAX = 80
# Lowercase words of letters and digits joined by single hyphens: what reads well in `/p/<slug>`.
SLUG_SHAPE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
TITLE_MAX = 300
QUESTION_MAX = 5_000
FIELDS = ("title", "slug", "question", "summary_md", "status")
# The project list: active work first, then paused, completed and archived.
STATUS_RANK = {status: rank for rank, status in enumerate(registry.PROJECT_STATUSES)}

# What a belief's status says on the project page (SPEC §11.2, the mentor update's shape).
ESTABLISHED_STATUSES = ("supported", "falsified")
OPEN_STATUSES = ("draft", "active", "weakened")
# The links through which an experiment (or its clean result) bears on a belief.
EVIDENCE_LINK_KINDS = ("tests", "supports", "contradicts", "produces_evidence_for")
# What a share link shows of a project's beliefs: the ones stated in public. A draft is not
# stated yet, and an archived one is put away (SPEC §11.4: nothing unpublished or private).
PUBLIC_BELIEF_STATUSES = ("active", "supported", "weakened", "falsified")
# The experiments a project page lists; the table filtered by the project has the rest.
# What the page lists of a large project before "N more" (the lists link to the rest): the
# page is read, not scanned, and rendering 300 beliefs twice and 200 experiments made it
# 62–82 ms at 2,000 experiments and 300 beliefs.
PAGE_EXPERIMENTS = 60
PAGE_QUESTIONS = 40
PAGE_BELIEFS_PER_STATUS = 20
PAGE_CITED = 12  # experiments cited after one research question
PAGE_LITERATURE = 30  # the rest is one click away, in the library filtered to the project
# What the page shows of each belief and experiment (templates/projects/detail.html), read as rows.
PAGE_BELIEF_COLUMNS = (Belief.id, Belief.number, Belief.title, Belief.current_belief, Belief.next_test,
                       Belief.status, Belief.confidence)
PAGE_PAPER_COLUMNS = (LiteratureItem.id, LiteratureItem.title, LiteratureItem.authors, LiteratureItem.year,
                      LiteratureItem.read_state)
PAGE_EXPERIMENT_COLUMNS = (Experiment.id, Experiment.number, Experiment.title, Experiment.status,
                           Experiment.has_clean_result, Experiment.updated_at)


# --- validation ---------------------------------------------------------------------------

def slug_from(title: str) -> str:
    """A slug made from a title: "Emergent misalignment, v2" → "emergent-misalignment-v2"."""
    slug = re.sub(r"[^a-z0-9]+", "-", (title or "").lower()).strip("-")
    return slug[:60].rstrip("-")


def clean_slug(raw) -> str:
    if not isinstance(raw, str):
        raise ValidationError("The slug must be text.", field="slug")
    slug = raw.strip()
    if not slug:
        raise ValidationError("The slug is required: lowercase letters, digits and hyphens.", field="slug")
    if len(slug) > SLUG_MAX:
        raise ValidationError(f"The slug is {len(slug)} characters; the limit is {SLUG_MAX}.", field="slug")
    if not SLUG_SHAPE.fullmatch(slug):
        raise ValidationError(f"The slug {slug[:40]!r} may only hold lowercase letters, digits and single hyphens "
                              "between them (e.g. emergent-misalignment).", field="slug")
    return slug


def _clean_title(raw) -> str:
    if not isinstance(raw, str) or not input_shape.has_visible_text(raw):
        raise ValidationError("The title is required.", field="title")
    title = " ".join(raw.split())
    if len(title) > TITLE_MAX:
        raise ValidationError(f"The title is {len(title)} characters; the limit is {TITLE_MAX}.", field="title")
    return redact(title)


def _clean_text(name: str, label: str, limit: int):
    def clean(raw) -> str:
        if raw is None:
            return ""
        if not isinstance(raw, str):
            raise ValidationError(f"The {label} must be text.", field=name)
        text = raw.strip()
        if len(text) > limit:
            raise ValidationError(f"The {label} is {len(text):,} characters; the limit is {limit:,}.", field=name)
        return redact(text)
    return clean


def _clean_markdown(name: str, label: str):
    def clean(raw) -> str:
        text = _clean_text(name, label, current_app.config["MARKDOWN_MAX"])(raw)
        render_markdown(text)  # refuses markdown nested too deep to render, before it is stored
        return text
    return clean


def clean_status(raw) -> str:
    if raw not in registry.PROJECT_STATUSES:
        raise ValidationError(f"Status must be one of: {', '.join(registry.PROJECT_STATUSES)}.", field="status")
    return raw


_CLEANERS = {"title": _clean_title, "slug": clean_slug,
             "question": _clean_text("question", "question", QUESTION_MAX),
             "summary_md": _clean_markdown("summary_md", "summary"), "status": clean_status}


def clean_fields(data: dict, *, partial: bool) -> dict:
    """Validated project fields from a form or a JSON body; unknown fields are refused, so a
    typo never looks like success. A create (not `partial`) needs a title; its slug defaults
    to one made from the title."""
    unknown = set(data) - set(FIELDS)
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(sorted(unknown))}.", field=sorted(unknown)[0])
    if not partial and isinstance(data.get("slug"), str) and not data["slug"].strip():
        data = {k: v for k, v in data.items() if k != "slug"}  # a new project's empty slug: made from the title
    cleaned = {name: _CLEANERS[name](data[name]) for name in FIELDS if name in data}
    if not partial:
        if "title" not in cleaned:
            _clean_title(None)
        if "slug" not in cleaned or not cleaned["slug"]:
            cleaned["slug"] = slug_from(cleaned["title"])
            if not cleaned["slug"]:
                raise ValidationError("The title has no letters or digits to make a slug from; type a slug.",
                                      field="slug")
    return cleaned


def _refuse_taken_slug(slug: str, project_id=None) -> None:
    holder = db.session.scalar(sa.select(Project).where(Project.slug == slug))
    if holder is not None and holder.id != project_id:
        raise ValidationError(f"The slug {slug!r} is taken by the project “{holder.title}”; choose another.",
                              field="slug", code="slug_taken")


# --- create, find, edit -------------------------------------------------------------------

def create_project(data: dict, actor: Actor) -> Project:
    """A new project (active unless told otherwise); the caller commits."""
    cleaned = clean_fields(data, partial=False)
    _refuse_taken_slug(cleaned["slug"])
    cleaned.setdefault("status", "active")
    project = Project(id=uuid.uuid4(), **cleaned)
    db.session.add(project)
    db.session.flush()
    return project


def update_project(project: Project, data: dict, actor: Actor, *, confirm_archive: bool = True) -> list[str]:
    """Apply edited fields; returns the names that changed. Archiving from a form needs the
    owner's confirmation (`confirm_archive`). The caller commits."""
    cleaned = clean_fields(data, partial=True)
    if "slug" in cleaned:
        _refuse_taken_slug(cleaned["slug"], project.id)
    if cleaned.get("status") == "archived" and project.status != "archived" and not confirm_archive:
        raise ValidationError("Archiving hides the project from the lists; tick the box to confirm.",
                              field="confirm_archive")
    changed = [name for name, value in cleaned.items() if getattr(project, name) != value]
    for name in changed:
        setattr(project, name, cleaned[name])
    return changed


def find(slug) -> Project | None:
    """The project with this slug, or None."""
    if not isinstance(slug, str) or len(slug) > SLUG_MAX:
        return None
    return db.session.scalar(sa.select(Project).where(Project.slug == slug))


def get_project(slug) -> Project:
    """The project with this slug; NotFound otherwise."""
    project = find(slug)
    if project is None:
        raise NotFound(f"No project {str(slug)[:80]!r}.")
    return project


def by_id(project_id) -> Project | None:
    return db.session.get(Project, project_id) if project_id else None


def by_ids(ids) -> dict:
    """Project id → Project for many ids, in one query (lists that name projects)."""
    ids = {i for i in ids if i}
    if not ids:
        return {}
    return {p.id: p for p in db.session.scalars(sa.select(Project).where(Project.id.in_(ids)))}


def list_projects(status: str | None = None) -> list[Project]:
    """Projects, active first, then most recently changed; only those in `status` when given."""
    query = sa.select(Project).order_by(sa.case(STATUS_RANK, value=Project.status), Project.updated_at.desc())
    if status:
        query = query.where(Project.status == clean_status(status))
    return list(db.session.scalars(query))


def choices() -> list[tuple[str, str, str]]:
    """(id, slug, title) of every project, active first: the selects of forms and filters."""
    rows = db.session.execute(sa.select(Project.id, Project.slug, Project.title)
                              .order_by(sa.case(STATUS_RANK, value=Project.status), Project.title))
    return [(str(row.id), row.slug, row.title) for row in rows]


def counts() -> dict:
    """Project id → (experiments, beliefs), in one query, for the project list."""
    experiments = sa.select(Experiment.project_id.label("pid"), sa.literal(1).label("experiment"),
                            sa.literal(0).label("belief")).where(Experiment.project_id.is_not(None))
    beliefs = sa.select(Belief.project_id.label("pid"), sa.literal(0), sa.literal(1)) \
        .where(Belief.project_id.is_not(None))
    both = sa.union_all(experiments, beliefs).subquery()
    rows = db.session.execute(sa.select(both.c.pid, sa.func.sum(both.c.experiment), sa.func.sum(both.c.belief))
                              .group_by(both.c.pid))
    return {pid: (int(e or 0), int(b or 0)) for pid, e, b in rows}


# --- the project page -----------------------------------------------------------------------

@dataclass
class ResearchQuestion:
    """One belief as the mentor update reads it: what is established (and on which
    experiments), or that it is open, and the next step."""
    belief: sa.Row  # PAGE_BELIEF_COLUMNS
    established: bool
    cited: list[int]
    next_step: str


@dataclass
class ProjectPage:
    project: Project
    summary_html: str
    research_questions: list[ResearchQuestion]
    experiments: list[sa.Row]  # PAGE_EXPERIMENT_COLUMNS
    more_experiments: int
    beliefs_by_status: list[tuple[str, list[sa.Row], int]]  # (status, PAGE_BELIEF_COLUMNS rows, how many)
    experiment_count: int = 0
    more_questions: int = 0
    page_cited: int = PAGE_CITED
    literature: list = field(default_factory=list)
    literature_count: int = 0
    # The statuses whose beliefs the research questions show in full: the beliefs list names
    # them without repeating their text (hundreds of beliefs made the page twice as long).
    question_statuses: tuple = ESTABLISHED_STATUSES + OPEN_STATUSES


def _cited_experiments(project_id) -> dict:
    """Belief id → the numbers of the experiments cited as its evidence, for every belief of
    the project, in one query whatever the counts: the experiments its versions were made on,
    and the evidence links between it and an experiment or a clean result (named by its
    experiment's id or one of its saved versions' ids), read both ways. Joined in SQL from the
    project's id: a list of hundreds of belief ids bound into the query cost more than the query."""
    ends = ("experiment", "clean_result")

    def linked(belief_kind, belief_id, other_kind, other_id):
        return (sa.select(Belief.id.label("belief_id"), other_id.label("other_id"))
                .join(RecordLink, sa.and_(belief_kind == "belief", belief_id == Belief.id))
                .where(Belief.project_id == project_id, RecordLink.kind.in_(EVIDENCE_LINK_KINDS),
                       other_kind.in_(ends)))

    links = sa.union_all(
        linked(RecordLink.target_kind, RecordLink.target_id, RecordLink.source_kind, RecordLink.source_id),
        linked(RecordLink.source_kind, RecordLink.source_id, RecordLink.target_kind, RecordLink.target_id)).subquery()
    versions = (sa.select(BeliefVersion.belief_id, Experiment.number)
                .join(Belief, Belief.id == BeliefVersion.belief_id)
                .join(Experiment, Experiment.id == BeliefVersion.experiment_id)
                .where(Belief.project_id == project_id))
    to_experiments = (sa.select(links.c.belief_id, Experiment.number)
                      .join(Experiment, Experiment.id == links.c.other_id))
    to_results = (sa.select(links.c.belief_id, Experiment.number)
                  .join(CleanResultVersion, CleanResultVersion.id == links.c.other_id)
                  .join(Experiment, Experiment.id == CleanResultVersion.experiment_id))
    cited: dict = defaultdict(set)
    for belief_id, number in db.session.execute(sa.union_all(versions, to_experiments, to_results)):
        cited[belief_id].add(number)
    return {belief_id: sorted(numbers) for belief_id, numbers in cited.items()}


def page(project: Project) -> ProjectPage:
    """Everything the project page shows but the narrative, in a constant number of queries."""
    # Rows of the columns the page shows, not ORM objects: a full project lists hundreds of
    # beliefs and experiments, and building an object for each was most of the page's time.
    beliefs = db.session.execute(sa.select(*PAGE_BELIEF_COLUMNS).where(Belief.project_id == project.id)
                                 .order_by(Belief.number)).all()
    cited = _cited_experiments(project.id) if beliefs else {}
    questions = [ResearchQuestion(b, b.status in ESTABLISHED_STATUSES, cited.get(b.id, []), b.next_test or "")
                 for b in beliefs if b.status in ESTABLISHED_STATUSES + OPEN_STATUSES]
    # Established first, so the page opens with what is known.
    questions.sort(key=lambda q: (not q.established, q.belief.number))
    grouped = [(status, [b for b in beliefs if b.status == status]) for status in registry.BELIEF_STATUSES]
    finished = Experiment.status.in_(sorted(registry.TERMINAL_STATUSES))
    total = db.session.scalar(sa.select(sa.func.count()).select_from(Experiment)
                              .where(Experiment.project_id == project.id)) or 0
    rows = db.session.execute(
        sa.select(*PAGE_EXPERIMENT_COLUMNS).where(Experiment.project_id == project.id)
        .order_by(sa.case((sa.and_(Experiment.has_clean_result.is_(True), finished), 0),
                          (Experiment.has_clean_result.is_(True), 1), else_=2),
                  Experiment.updated_at.desc(), Experiment.number.desc()).limit(PAGE_EXPERIMENTS)).all()
    # The project's papers in the library's queue order (the literature agent's rank, then the
    # newest), which ix_literature_items_queue walks and stops at the page's last; only the
    # shown columns. Sorting all of a project's papers to put the unread first, with every
    # abstract carried through the sort, took 7–9 ms at 5,000 papers.
    in_project = LiteratureItem.project_id == project.id
    papers = db.session.execute(
        sa.select(*PAGE_PAPER_COLUMNS).where(in_project)
        .order_by(LiteratureItem.score.desc().nulls_last(), LiteratureItem.created_at.desc(), LiteratureItem.id)
        .limit(PAGE_LITERATURE)).all()
    paper_count = db.session.scalar(sa.select(sa.func.count()).select_from(LiteratureItem).where(in_project)) or 0
    return ProjectPage(project=project, summary_html=render_markdown(project.summary_md),
                       research_questions=questions[:PAGE_QUESTIONS], experiments=rows,
                       more_experiments=max(0, total - len(rows)),
                       beliefs_by_status=[(status, found[:PAGE_BELIEFS_PER_STATUS], len(found))
                                          for status, found in grouped if found],
                       experiment_count=total, literature=papers, literature_count=paper_count,
                       more_questions=max(0, len(questions) - PAGE_QUESTIONS))


def project_of(experiment: Experiment) -> Project | None:
    """The project an experiment belongs to, if any (the experiment page's link)."""
    return by_id(experiment.project_id)


# --- what a project's share link shows ------------------------------------------------------

@dataclass(frozen=True)
class PublicBelief:
    """A belief's public text: no evidence drafts, no proposals, no reasoning."""
    number: int
    title: str
    current_belief_html: str
    status: str
    confidence: str


def public_beliefs(project_id) -> list[PublicBelief]:
    """The project's beliefs as a share link shows them (stated ones only), in one query."""
    rows = db.session.execute(
        sa.select(Belief.number, Belief.title, Belief.current_belief, Belief.status, Belief.confidence)
        .where(Belief.project_id == project_id, Belief.status.in_(PUBLIC_BELIEF_STATUSES))
        .order_by(Belief.number))
    return [PublicBelief(row.number, row.title, render_markdown(row.current_belief), row.status, row.confidence)
            for row in rows]


def shared_items(results) -> list[dict]:
    """The promoted results of a project link as its list shows them (as promoted, never the draft)."""
    return [{"experiment": r.experiment, "title": title_without_confidence(r.promotion.title),
             "confidence": confidence_of(r.promotion.title), "excerpt": excerpt(r.promotion.body)}
            for r in results]
