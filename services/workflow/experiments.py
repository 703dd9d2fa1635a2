"""Creating, finding and listing experiments; the board and the owner's queue."""
from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Callable

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.dialects.postgresql import insert as pg_insert

from models import Counter, Experiment, Pod, User, WorkflowEvent, db
from models.experiment import StatusFacts
from models.research import Project
from services.core import events, input_shape, lean_reads, pod_accounts, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Forbidden, NotFound, ValidationError
from services.core.redact import redact
from services.workflow import lifecycle

NUMBER_COUNTER = "experiment_number"
EDITABLE_FIELDS = ("title", "hypothesis", "kind", "priority", "compute_size", "tags",
                   "assignee_kind", "pod_account", "cost_cap_usd", "git_branch", "git_commit", "project_id")


# --- validation -----------------------------------------------------------------------

def clean_fields(data: dict, *, partial: bool = False, limits=None) -> dict:
    """Validate experiment fields from a form or JSON body; raise on the first problem.

    Unknown keys are refused rather than ignored, so a typo never looks like success. Each
    field has its cleaner in FIELD_CLEANERS, checked in that order; `limits` (default: the
    app's config) gives the length limits. A create (not `partial`) needs a title.
    """
    limits = current_app.config if limits is None else limits
    unknown = set(data) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(sorted(unknown))}.", field=sorted(unknown)[0])
    cleaned: dict = {}
    for name, clean in FIELD_CLEANERS:
        if name in data or (name == "title" and not partial):
            value = clean(data.get(name), limits)
            if value is not _LEAVE_OUT:
                cleaned[name] = value
    return cleaned


# A cleaner's answer for "nothing to store": an empty choice keeps the current value.
_LEAVE_OUT = object()


def _clean_title(title, limits) -> str:
    if not isinstance(title, str) or not title.strip():
        raise ValidationError("Title is required.", field="title")
    title = " ".join(title.split())
    if not input_shape.has_visible_text(title):
        raise ValidationError("Title is required: this one has no visible character (only spaces, "
                              "invisible or blank characters).", field="title")
    if len(title) > limits["TITLE_MAX"]:
        raise ValidationError(f"Title is {len(title)} characters; the limit is {limits['TITLE_MAX']}.",
                              field="title")
    return redact(title)


def _clean_hypothesis(hypothesis, limits) -> str | None:
    if hypothesis is not None and not isinstance(hypothesis, str):
        raise ValidationError("Hypothesis must be text.", field="hypothesis")
    hypothesis = (hypothesis or "").strip() or None
    if hypothesis and len(hypothesis) > limits["HYPOTHESIS_MAX"]:
        raise ValidationError(
            f"Hypothesis is {len(hypothesis)} characters; the limit is {limits['HYPOTHESIS_MAX']}.",
            field="hypothesis")
    return redact(hypothesis)


def _choice(name: str, choices):
    """A cleaner for a field that takes one of `choices`; empty leaves the field as it is."""
    def clean(value, limits):
        if value in (None, ""):
            return _LEAVE_OUT
        if value not in choices:
            raise ValidationError(f"{name.replace('_', ' ').capitalize()} must be one of: {', '.join(choices)}.",
                                  field=name)
        return value
    return clean


def _clean_compute_size(size, limits) -> str | None:
    size = size or None
    if size is not None and size not in registry.COMPUTE_SIZES:
        raise ValidationError(f"Compute size must be one of: {', '.join(registry.COMPUTE_SIZES)}.",
                              field="compute_size")
    return size


def _clean_cost_cap(cap, limits) -> float | None:
    if cap in (None, ""):
        return None
    try:
        cap = float(cap)
    except (TypeError, ValueError):
        raise ValidationError("Cost cap must be a number of dollars.", field="cost_cap_usd")
    if not 0 <= cap <= 1_000_000:
        raise ValidationError("Cost cap must be between 0 and 1,000,000 dollars.", field="cost_cap_usd")
    return cap


def _git_name(name: str, limit: int):
    """A cleaner for a git branch or commit: no spaces, at most `limit` characters."""
    def clean(value, limits):
        value = (value or "").strip() or None
        if value and (len(value) > limit or any(c.isspace() for c in value)):
            raise ValidationError(f"{name.replace('_', ' ').capitalize()} is not valid.", field=name)
        return value
    return clean


def _clean_project_id(raw, limits) -> uuid.UUID | None:
    """The project an experiment belongs to, by the project's id; empty or null: none. The
    project must exist (experiments.project_id has no foreign key: projects are archived,
    never deleted, so checking here once keeps every id naming one)."""
    if raw in (None, ""):
        return None
    try:
        project_id = uuid.UUID(str(raw).strip())
    except ValueError:
        project_id = None
    if project_id is None or db.session.get(Project, project_id) is None:
        raise ValidationError(f"No project with the id {str(raw)[:60]!r}; give the id of an existing project "
                              "(GET /api/projects lists them), or null for none.", field="project_id")
    return project_id


FIELD_CLEANERS = (
    ("title", _clean_title),
    ("hypothesis", _clean_hypothesis),
    ("kind", _choice("kind", registry.EXPERIMENT_KINDS)),
    ("priority", _choice("priority", registry.PRIORITIES)),
    ("assignee_kind", _choice("assignee_kind", registry.ASSIGNEE_KINDS)),
    ("pod_account", _choice("pod_account", pod_accounts.ACCOUNTS)),
    ("compute_size", _clean_compute_size),
    ("tags", lambda tags, limits: clean_tags(tags, limits)),
    ("cost_cap_usd", _clean_cost_cap),
    ("git_branch", _git_name("git_branch", 255)),
    ("git_commit", _git_name("git_commit", 64)),
    ("project_id", _clean_project_id),
)


def clean_tags(raw, limits=None) -> list[str]:
    """Tags from a list or a comma-separated string: trimmed, de-duplicated, capped."""
    limits = current_app.config if limits is None else limits
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, (list, tuple)) or not all(isinstance(t, str) for t in raw):
        raise ValidationError("Tags must be a list of strings.", field="tags")
    tags: list[str] = []
    for tag in raw:
        tag = redact(tag.strip())
        if not tag:
            continue
        if len(tag) > limits["TAG_MAX_CHARS"]:
            raise ValidationError(f"Tag {tag[:20]!r}… is longer than {limits['TAG_MAX_CHARS']} characters.",
                                  field="tags")
        if tag not in tags:
            tags.append(tag)
    if len(tags) > limits["TAGS_MAX"]:
        raise ValidationError(f"At most {limits['TAGS_MAX']} tags.", field="tags")
    return tags


# --- numbering ------------------------------------------------------------------------

def next_number() -> int:
    """The next experiment number, safe under concurrent creators.

    One UPDATE … RETURNING on the counter row: the row lock makes concurrent callers
    take turns. The CASE lets SAGAN_FIRST_EXPERIMENT_NUMBER (e.g. 366 after the old
    system's #365) take effect on an existing counter.
    """
    first = current_app.config["SAGAN_FIRST_EXPERIMENT_NUMBER"]
    bump = (sa.update(Counter).where(Counter.name == NUMBER_COUNTER)
            .values(value=sa.case((Counter.value + 1 < first, first), else_=Counter.value + 1))
            .returning(Counter.value))
    value = db.session.execute(bump).scalar()
    if value is None:
        _create_counter()
        value = db.session.execute(bump).scalar()
    return int(value)


def _create_counter() -> None:
    """Create the counter row at the highest number in use (imports keep theirs)."""
    highest = db.session.scalar(sa.select(sa.func.max(Experiment.number))) or 0
    if db.engine.dialect.name == "postgresql":
        stmt = pg_insert(Counter).values(name=NUMBER_COUNTER, value=highest).on_conflict_do_nothing()
    else:
        stmt = sa.insert(Counter).values(name=NUMBER_COUNTER, value=highest).prefix_with("OR IGNORE")
    db.session.execute(stmt)


def raise_counter_to(number: int) -> None:
    """Make future numbers follow `number` (imported experiments keep theirs)."""
    if db.session.get(Counter, NUMBER_COUNTER) is None:
        _create_counter()
    db.session.execute(sa.update(Counter).where(Counter.name == NUMBER_COUNTER, Counter.value < number)
                       .values(value=number))


# --- create, find, edit ----------------------------------------------------------------

def create_experiment(data: dict, actor: Actor, *, note: str | None = None) -> Experiment:
    """Create an experiment in `proposed` with a fresh number; the caller commits.

    A cost cap is the owner's to set, here as in `patch`: a token could otherwise create an
    experiment with a huge cap, which approval keeps instead of the default 1.5× estimate.
    """
    _refuse_owner_only_fields(data, actor)
    cleaned = clean_fields(data)
    cleaned.setdefault("pod_account", current_app.config["SAGAN_DEFAULT_POD_ACCOUNT"])
    now = utcnow()
    experiment = Experiment(id=uuid.uuid4(), number=next_number(), status="proposed",
                            created_at=now, updated_at=now, **cleaned)
    db.session.add(experiment)
    db.session.flush()
    events.record(experiment, "note", actor, note=note or "Experiment created.")
    return experiment


def propose_for_member(data: dict, project_id: uuid.UUID, member_id: uuid.UUID, actor: Actor) -> Experiment:
    """An invited collaborator's proposal in their project (the caller checked they may):
    only a title and a hypothesis, in `proposed`, marked as theirs. The caller commits."""
    fields = {key: value for key, value in data.items() if key in ("title", "hypothesis") and value is not None}
    experiment = create_experiment({**fields, "project_id": str(project_id)}, actor,
                                   note=f"Proposed by {actor.label}.")
    experiment.proposed_by_member_id = member_id
    return experiment


def update_experiment(experiment: Experiment, data: dict, actor: Actor) -> list[str]:
    """Apply edited fields; records which fields changed. The caller commits."""
    cleaned = clean_fields(data, partial=True)
    changed = [name for name, value in cleaned.items() if getattr(experiment, name) != value]
    for name in changed:
        setattr(experiment, name, cleaned[name])
    if changed:
        events.record(experiment, "note", actor, note=f"Edited {', '.join(changed)}.",
                      metadata={"fields": changed})
    return changed


# Fields only the owner's session may change (SPEC §9.2): no token or agent can.
OWNER_ONLY_FIELDS = frozenset({"auto_approve_plan", "cost_cap_usd", "pod_spec"})
PATCHABLE = frozenset(EDITABLE_FIELDS) | OWNER_ONLY_FIELDS | {"status", "note", "expected_status"}


def share_agent_logs(experiment: Experiment, shared: bool, actor: Actor) -> bool:
    """Share (or stop sharing) the experiment's agent runs with its project's collaborators,
    read-only (SPEC §13). Recorded on the timeline; True when it changed anything."""
    if experiment.agent_logs_shared == shared:
        return False
    experiment.agent_logs_shared = shared
    events.record(experiment, "note", actor,
                  note="Agent logs shared with the project's collaborators." if shared
                  else "Agent logs no longer shared with collaborators.")
    return True


def _refuse_owner_only_fields(data: dict, actor: Actor) -> None:
    owner_only = OWNER_ONLY_FIELDS & set(data)
    if owner_only and actor.kind != "owner":
        raise Forbidden(f"Only the owner's session can set {', '.join(sorted(owner_only))}.",
                        code="owner_session_required")


def patch(experiment: Experiment, data: dict, actor: Actor) -> list:
    """The API's partial update: record fields, auto-approve, and a status change through
    transition(). Every check runs before anything changes. Returns the transition's side
    effects; the caller commits, then runs them."""
    unknown = set(data) - PATCHABLE
    if unknown:
        raise ValidationError(f"Unknown or read-only field(s): {', '.join(sorted(unknown))}.",
                              field=sorted(unknown)[0])
    _refuse_owner_only_fields(data, actor)
    if "pod_spec" in data:
        raise ValidationError("The pod spec comes from an approved plan; submit a new plan instead.",
                              field="pod_spec")
    if "auto_approve_plan" in data and not isinstance(data["auto_approve_plan"], bool):
        raise ValidationError("auto_approve_plan must be true or false.", field="auto_approve_plan")
    if "status" in data and not isinstance(data["status"], str):
        raise ValidationError("status must be a string.", field="status")
    if "note" in data and "status" not in data:
        raise ValidationError("A note goes with a status change; post a marker for a plain note.", field="note")

    fields = {k: v for k, v in data.items() if k in EDITABLE_FIELDS}
    if fields:
        update_experiment(experiment, fields, actor)
    if "auto_approve_plan" in data and data["auto_approve_plan"] != experiment.auto_approve_plan:
        experiment.auto_approve_plan = data["auto_approve_plan"]
        events.record(experiment, "note", actor,
                      note=f"Auto-approve of plans turned {'on' if experiment.auto_approve_plan else 'off'}.",
                      metadata={"fields": ["auto_approve_plan"], "auto_approve_plan": experiment.auto_approve_plan})
    if "status" in data:
        return lifecycle.transition(experiment, data["status"], actor, note=data.get("note"),
                                    expected_status=data.get("expected_status"))
    return []


def numbers_by_id(ids) -> dict:
    """Experiment id → number for many ids, in one query (lists that link to experiments)."""
    ids = {i for i in ids if i}
    if not ids:
        return {}
    return dict(db.session.execute(sa.select(Experiment.id, Experiment.number).where(Experiment.id.in_(ids))).all())


def get_experiment(ref) -> Experiment:
    """Find by number (`365`, `#365`) or uuid; NotFound otherwise."""
    experiment = None
    text = str(ref).strip().lstrip("#")
    if text.isdigit():
        if int(text) < 2**63:
            experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == int(text)))
    else:
        try:
            experiment = db.session.get(Experiment, uuid.UUID(text))
        except ValueError:
            experiment = None
    if experiment is None:
        raise NotFound(f"No experiment {ref}.")
    return experiment


def newest(limit: int, status: str | None = None, project: str | None = None) -> list[Experiment]:
    """Up to `limit` experiments, newest first, only those in `status` and in the project
    whose slug is `project` when they are given (a slug that names no project is refused)."""
    query = sa.select(Experiment).order_by(Experiment.number.desc()).limit(limit)
    if status:
        if status not in registry.STATUS_BY_NAME:
            raise ValidationError(f"Unknown status {status!r}.", field="status")
        query = query.where(Experiment.status == status)
    if project:
        project_id = db.session.scalar(sa.select(Project.id).where(Project.slug == project[:80]))
        if project_id is None:
            raise ValidationError(f"No project {project[:80]!r}; GET /api/projects lists the slugs.", field="project")
        query = query.where(Experiment.project_id == project_id)
    return list(db.session.scalars(query))


# --- board ---------------------------------------------------------------------------

@dataclass
class BoardFilters:
    turn: str = ""   # "owner" | "sagan" | ""
    kind: str = ""
    tag: str = ""
    text: str = ""
    project: str = ""  # a project's slug; one that names no project matches nothing

    @classmethod
    def from_args(cls, args) -> "BoardFilters":
        turn = args.get("turn", "")
        kind = args.get("kind", "")
        return cls(turn=turn if turn in ("owner", "sagan") else "",
                   kind=kind if kind in registry.EXPERIMENT_KINDS else "",
                   tag=(args.get("tag") or "").strip()[:80],
                   text=(args.get("q") or "").strip()[:200],
                   project=(args.get("project") or "").strip()[:80])

    @property
    def active(self) -> bool:
        return bool(self.turn or self.kind or self.tag or self.text or self.project)

    def as_args(self) -> dict:
        return {k: v for k, v in (("turn", self.turn), ("kind", self.kind), ("tag", self.tag),
                                  ("q", self.text), ("project", self.project)) if v}


@dataclass
class BoardColumn:
    key: str
    title: str
    collapsed: bool
    cards: list[BoardCard] = field(default_factory=list)
    more: int = 0


def _apply_filters(query, filters: BoardFilters):
    if filters.turn == "owner":
        query = query.where(Experiment.status.in_(registry.OWNER_TURN_STATUSES))
    elif filters.turn == "sagan":
        query = query.where(Experiment.status.not_in(registry.OWNER_TURN_STATUSES | registry.TERMINAL_STATUSES))
    if filters.kind:
        query = query.where(Experiment.kind == filters.kind)
    if filters.tag:
        query = query.where(_has_tag(filters.tag))
    if filters.project:
        # The slug is looked up inside the statement: no query of its own on every poll.
        query = query.where(Experiment.project_id == sa.select(Project.id)
                            .where(Project.slug == filters.project).scalar_subquery())
    if filters.text:
        text = filters.text.lstrip("#")
        condition = Experiment.title.ilike(f"%{_escape_like(text)}%", escape="\\")
        if text.isdigit() and int(text) < 2**63:
            condition = sa.or_(condition, Experiment.number == int(text))
        query = query.where(condition)
    return query


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _has_tag(tag: str):
    """A portable "tags contains tag" test (JSONB containment on PostgreSQL)."""
    if db.engine.dialect.name == "postgresql":
        return Experiment.tags.op("@>")(sa.func.jsonb_build_array(tag))
    each = sa.func.json_each(Experiment.tags).table_valued("value")
    return sa.exists(sa.select(1).select_from(each).where(each.c.value == tag))


# What a card shows, and what its move menu, spend and progress are found by: the only
# columns the board reads, as plain rows. Building a full ORM object for each of 274
# cards (22 columns, identity map, change tracking) was a fifth of the board's time.
_CARD_FIELDS = ("id", "number", "title", "status", "kind", "priority", "tags", "status_before_block",
                "last_event_at", "created_at")
# The tags come as their JSON text and are decoded through `_card_tags`: a board has a
# handful of distinct tag lists, and psycopg decoding each row's JSON was about a tenth of the
# board's time at 10,000 experiments (923 cards).
CARD_COLUMNS = tuple(sa.cast(Experiment.tags, sa.Text).label("tags") if name == "tags" else getattr(Experiment, name)
                     for name in _CARD_FIELDS)
_TAGS_AT = _CARD_FIELDS.index("tags")


@functools.lru_cache(maxsize=1024)
def _card_tags(text: str | None) -> tuple:
    """A card's tags from their JSON text, as a tuple (shared between cards: never changed)."""
    return tuple(json.loads(text)) if text else ()


def _card(row) -> "BoardCard":
    fields = list(row)
    fields[_TAGS_AT] = _card_tags(fields[_TAGS_AT])
    return BoardCard._make(fields)


class BoardCard(StatusFacts, namedtuple("_CardRow", _CARD_FIELDS)):
    """An experiment as its board card reads it: the row, with the facts its status gives
    (turn, status_info, owner_turn, pod_free, terminal) as on the model."""
    __slots__ = ()


def board(filters: BoardFilters) -> list[BoardColumn]:
    """Board columns with their cards, in two queries whatever the number of cards.

    Each column shows its first few cards — active ones by priority, then the most recently
    moved; finished ones the most recent — and counts the rest, which the table view lists
    (`table(column=…)`). A person reads a column of thirty cards, not three hundred, and
    rendering every active card made the board's cost follow the active count: 100–118 ms
    at 10,000 experiments with 923 active.
    """
    columns = {key: BoardColumn(key, title, key in registry.COLLAPSED_COLUMNS)
               for key, title in registry.BOARD_COLUMNS}
    order = (Experiment.priority == "urgent").desc(), (Experiment.priority == "high").desc(), \
        sa.func.coalesce(Experiment.last_event_at, Experiment.created_at).desc()
    active = _apply_filters(sa.select(*CARD_COLUMNS).where(
        Experiment.status.not_in(registry.TERMINAL_STATUSES)), filters).order_by(*order)
    active_limit = current_app.config["BOARD_ACTIVE_LIMIT"]
    column_of = {status.name: status.column for status in registry.STATUSES}
    for row in db.session.execute(active):
        column = columns[column_of[row.status]]
        if len(column.cards) < active_limit:
            column.cards.append(_card(row))
        else:
            column.more += 1  # counted, not built: the rows past the limit are only a number

    limit = current_app.config["BOARD_DONE_LIMIT"]
    finished_columns = _finished_columns()
    # Per finished column its newest `limit` cards, each a short backward scan of the
    # updated_at index (a window over every finished row sorted them all: 3.5 ms of the
    # board's database time at 2,000 experiments), and its total as a count.
    # (Each part is a subquery of its own: SQLite refuses ORDER BY and LIMIT in a part of a UNION.)
    newest = sa.union_all(*(
        sa.select(_apply_filters(sa.select(Experiment.id).where(Experiment.status.in_(statuses)), filters)
                  .order_by(Experiment.updated_at.desc()).limit(limit).subquery().c.id)
        for statuses in finished_columns.values()))
    totals = [_apply_filters(sa.select(sa.func.count()).select_from(Experiment)
                             .where(Experiment.status.in_(statuses)), filters).scalar_subquery()
              for statuses in finished_columns.values()]
    finished = (sa.select(*CARD_COLUMNS, *totals)
                .where(Experiment.id.in_(newest)).order_by(Experiment.updated_at.desc()))
    width = len(_CARD_FIELDS)
    total_at = {key: width + i for i, key in enumerate(finished_columns)}  # where each column's total sits
    for row in db.session.execute(finished):
        card = _card(row[:width])
        key = card.status_info.column
        column = columns[key]
        column.cards.append(card)
        column.more = max(0, row[total_at[key]] - limit)
    return list(columns.values())


def _finished_columns() -> dict[str, list[str]]:
    """Board column → the finished statuses it shows, in board order."""
    out: dict[str, list[str]] = {}
    for key, _title in registry.BOARD_COLUMNS:
        statuses = [s for s in registry.statuses_in_column(key) if s in registry.TERMINAL_STATUSES]
        if statuses:
            out[key] = statuses
    return out


def board_version() -> str:
    """A cheap fingerprint of everything the board shows, for ETag / 304 polling."""
    latest, count = db.session.execute(
        sa.select(sa.func.max(Experiment.updated_at), sa.func.count(Experiment.id))).one()
    return f"{count}-{latest.timestamp() if latest else 0:.6f}"


_TAGS_KEY = "sagan_board_tags"


def all_tags(limit: int = 200, *, version: str | None = None) -> list[str]:
    """Tags in use, for the board's filter menu. Given the board's `version`, the answer is
    kept with it (one per app and process) and read again only when the version moves:
    reading every experiment's tags was the board's costliest statement at 10,000 experiments
    (7.5 ms of a render), and a tag added or removed moves the experiment's `updated_at`, so
    an unchanged version means unchanged tags."""
    kept = current_app.extensions.get(_TAGS_KEY)
    if version is not None and kept is not None and kept[0] == (version, limit):
        return kept[1]
    tags = _read_tags(limit)
    if version is not None:
        current_app.extensions[_TAGS_KEY] = ((version, limit), tags)
    return tags


def _read_tags(limit: int) -> list[str]:
    if db.engine.dialect.name == "postgresql":
        rows = db.session.execute(sa.text(
            "SELECT DISTINCT jsonb_array_elements_text(tags) AS tag FROM experiments "
            "ORDER BY tag LIMIT :limit"), {"limit": limit})
    else:
        rows = db.session.execute(sa.text(
            "SELECT DISTINCT json_each.value AS tag FROM experiments, json_each(experiments.tags) "
            "ORDER BY tag LIMIT :limit"), {"limit": limit})
    return [row.tag for row in rows]


# --- the owner's queue ----------------------------------------------------------------

def owner_turn_count() -> int:
    return db.session.scalar(sa.select(sa.func.count(Experiment.id)).where(
        Experiment.status.in_(registry.OWNER_TURN_STATUSES))) or 0


def owner_turn_list() -> list[Experiment]:
    """Experiments waiting for the owner, most urgent and oldest first."""
    rank = sa.case(registry.PRIORITY_RANK, value=Experiment.priority)
    return list(db.session.scalars(
        sa.select(Experiment).where(Experiment.status.in_(registry.OWNER_TURN_STATUSES))
        .order_by(rank.desc(), sa.func.coalesce(Experiment.last_event_at, Experiment.created_at))))


# --- table view -----------------------------------------------------------------------

SORTABLE = {
    "number": Experiment.number, "title": Experiment.title, "status": Experiment.status,
    "priority": sa.case(registry.PRIORITY_RANK, value=Experiment.priority),
    "updated": Experiment.updated_at, "created": Experiment.created_at,
}


@dataclass
class TablePage:
    experiments: list[Experiment]
    total: int
    page: int
    pages: int


def table(args, *, per_page: int = 50) -> tuple[TablePage, dict]:
    """The sortable, filterable experiments table; unknown filter values are ignored."""
    filters = BoardFilters.from_args(args)
    status = args.get("status", "")
    if status not in registry.STATUS_BY_NAME:
        status = ""
    priority = args.get("priority", "")
    if priority not in registry.PRIORITIES:
        priority = ""
    sort = args.get("sort", "number")
    if sort not in SORTABLE:
        sort = "number"
    direction = "asc" if args.get("dir") == "asc" else "desc"
    try:
        page = max(1, int(args.get("page", 1)))
    except ValueError:
        page = 1
    board_column = args.get("column", "")
    if board_column not in registry.BOARD_COLUMN_KEYS:
        board_column = ""
    query = _apply_filters(sa.select(Experiment), filters)
    if status:
        query = query.where(Experiment.status == status)
    if board_column:
        query = query.where(Experiment.status.in_(registry.statuses_in_column(board_column)))
    if priority:
        query = query.where(Experiment.priority == priority)
    total = db.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
    column = SORTABLE[sort]
    query = query.order_by(column.asc() if direction == "asc" else column.desc(), Experiment.number.desc())
    pages = max(1, -(-total // per_page))
    # Past the end shows the last page; an absurd ?page= must not overflow the OFFSET.
    page = min(page, pages)
    rows = list(db.session.scalars(query.limit(per_page).offset((page - 1) * per_page)))
    state = {**filters.as_args(), "status": status, "priority": priority, "sort": sort, "dir": direction,
             "column": board_column}
    return TablePage(rows, total, page, pages), state


# --- the experiment page's poll -------------------------------------------------------

@dataclass(frozen=True)
class PageVersion:
    """What the experiment page's poll needs: the fingerprint and whether polling goes on.
    `steady`: the fingerprint without the parts a pod's progress post moves (`steady_part`)."""
    version: str
    terminal: bool
    steady: str = ""


# Written into the statement, not sent as parameters with every poll.
_EMPTY, _COLON, _BAR = (sa.literal_column(f"'{text}'", sa.String) for text in ("", ":", "|"))


def _as_text(value) -> sa.ColumnElement:
    return sa.func.coalesce(sa.cast(value, sa.String), _EMPTY)


@dataclass(frozen=True)
class PageWatch:
    """Rows of one table that the experiment page shows: `stamp` moves when a row is added or
    edited, `scope(experiment_id)` picks the experiment's rows (a deleted row moves the count)."""
    stamp: object
    scope: Callable[[object], sa.ColumnElement]
    # Moved by every progress post of a running pod (the pods' rows): the live poll may let
    # such a change wait a little (`steady_part`, blueprints/experiments.py).
    moved_by_progress: bool = False


# What the page's poll watches, beside the experiment's own row and its timeline: set once from
# the page's panel declarations (blueprints/experiment_panels.py), so a panel's tables are
# named where the panel is, and a new panel cannot be forgotten by the fingerprint.
_page_watches: tuple[PageWatch, ...] = ()


def watch_page(watches) -> None:
    """Make the poll's fingerprint read `watches` (the page's panels' tables) from now on."""
    global _page_watches
    _page_watches = tuple(watches)
    _page_version_query.cache_clear()
    _live_poll_query.cache_clear()


def _page_parts(experiment_id) -> list:
    """Per watched table (the timeline apart, below), "newest change:row count" as one text: a
    new row, an edited row and a deleted row (a removed figure) each move one of the two. One
    subquery per table reads both in one pass of its index (two subqueries per table cost twice
    the descents), and counts rows with count(*), which an index on (key, stamp) answers alone —
    count(id) made PostgreSQL visit every event's row for its id."""
    if not _page_watches:
        raise RuntimeError("The experiment page's panels have not declared what they show "
                           "(blueprints.experiment_panels.install runs when the app is made).")
    # The timeline is append-only: events are never edited or deleted (a deleted experiment
    # takes its events with it, and its poll then finds no row), and the one writer that
    # backdates events, a re-import, touches the experiment. So its newest stamp alone moves
    # when it grows, read from the end of its (entity_id, created_at) index; count(*) read
    # all of an experiment's events, 0.35 of the poll's 0.39 ms of database CPU at 2,000.
    timeline = sa.select(_as_text(sa.func.max(WorkflowEvent.created_at))) \
        .where(WorkflowEvent.entity_id == experiment_id).scalar_subquery()
    return [timeline, *(sa.select(_as_text(sa.func.max(watch.stamp)) + _COLON + _as_text(sa.func.count()))
                        .where(watch.scope(experiment_id)).scalar_subquery() for watch in _page_watches)]


def _fingerprint() -> sa.ColumnElement:
    """Everything the page shows that can change, as one text made by the database: the
    experiment's status and last edit, then each table's part. One text column instead
    of 24 typed ones: the driver describes and converts one value, not 24."""
    text = _as_text(Experiment.status) + _BAR + _as_text(Experiment.updated_at)
    for part in _page_parts(Experiment.id):
        text = text + _BAR + part
    return text


def _version_of(status: str, fingerprint: str) -> PageVersion:
    return PageVersion(version=hashlib.blake2b(fingerprint.encode(), digest_size=12).hexdigest(),
                       terminal=status in registry.TERMINAL_STATUSES, steady=steady_part(fingerprint))


# Where the parts sit in the fingerprint's text: status, last edit, the timeline, then the watches.
_TIMELINE_PART = 2
_FIRST_WATCH_PART = 3


def steady_part(fingerprint: str) -> str:
    """The fingerprint without what a pod's progress post moves: the timeline's newest stamp
    (each post is a `progress` event) and the parts of watches `moved_by_progress`. Two
    versions with the same steady part differ by progress posts — or by something else in
    those parts, which `changed_besides_progress` tells."""
    parts = fingerprint.split("|")
    moved = {_TIMELINE_PART} | {_FIRST_WATCH_PART + index for index, watch in enumerate(_page_watches)
                                if watch.moved_by_progress}
    return "|".join(part for index, part in enumerate(parts) if index not in moved)


def changed_besides_progress(number: int, since, pod_statuses: frozenset) -> bool:
    """Whether the experiment's timeline has an event other than a pod's progress since
    `since`, or its pods are not (id, status) `pod_statuses` any more: what the page must show
    at once, where progress posts alone may wait. Two short reads, on the changed path only."""
    experiment_id = db.session.scalar(sa.select(Experiment.id).where(Experiment.number == number))
    if experiment_id is None:
        return True
    other_event = db.session.scalar(sa.select(sa.exists().where(
        WorkflowEvent.entity_id == experiment_id, WorkflowEvent.created_at > since,
        WorkflowEvent.event_type != "progress")))
    if other_event:
        return True
    pods = db.session.execute(sa.select(Pod.id, Pod.status).where(Pod.experiment_id == experiment_id)).all()
    return frozenset((str(pod_id), status) for pod_id, status in pods) != pod_statuses


@functools.cache
def _page_version_query():
    """The fingerprint's statement, built once: its subqueries cost milliseconds of Python
    to construct, far more than the query takes to run (docs/performance.md). Only the
    statement is kept; every poll runs it afresh."""
    return sa.select(Experiment.status, _fingerprint()).where(Experiment.number == sa.bindparam("number"))


@functools.cache
def _live_poll_query():
    """The poll's one statement: beside the fingerprint, the session version of the user
    the session cookie names (NULL for no such user, or no user_id), so the session check
    and the answer share one round trip. Built once, like `_page_version_query`."""
    # Only the owner's session: a member's cookie finds no version here, so the poll goes on
    # to Flask, whose access rule answers it (services/core/permissions.py).
    session_version = sa.select(User.session_version) \
        .where(User.id == sa.bindparam("user_id"), User.role == "owner").scalar_subquery()
    return sa.select(session_version, Experiment.status, _fingerprint()) \
        .where(Experiment.number == sa.bindparam("number"))


def page_version(number: int) -> PageVersion:
    """A fingerprint of everything the experiment page shows, in one indexed query (the
    poll's only one besides the session's user), for ETag / 304 polling."""
    row = db.session.execute(_page_version_query(), {"number": number}).one_or_none()
    if row is None:
        raise NotFound(f"No experiment {number}.")
    return _version_of(row[0], row[1])


@dataclass(frozen=True)
class LivePoll:
    """The experiment page's poll in one read: the page's version (None: no such
    experiment) and the session version of `user_id` (None: no such user or none asked)."""
    version: PageVersion | None
    session_version: int | None


def live_poll(number: int, user_id: uuid.UUID | None) -> LivePoll:
    """The fingerprint and the session user's session version in one round trip, on the
    poll connection (services/core/lean_reads.py): read afresh on every call."""
    row = lean_reads.first_row(_live_poll_query(), {"number": number, "user_id": user_id})
    if row is None:
        return LivePoll(version=None, session_version=None)
    return LivePoll(version=_version_of(row[1], row[2]), session_version=row[0])
