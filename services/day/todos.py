"""Todos (SPEC §12.2): what the owner means to do, from a title dropped in the inbox to an
experiment.

A todo is read as "T<number>" everywhere (pages, API, typed links), as a belief is "B<number>".
"Make it an experiment" is one action: it creates the experiment through the experiment
service, links the experiment to the todo (experiment `derives_from` todo: the experiment is
what the todo became), moves the todo to `planning`, and remembers the experiment on the todo
(`experiment_id`), so asking again answers the same experiment instead of a second one.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import Experiment, MemberProject, User, db
from models.day import Todo
from models.research import Project
from services.core import input_shape, permissions, records, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, NotFound, ValidationError
from services.core.sanitize import check_markdown_nesting, render_markdown
from services.research import beliefs, links
from services.workflow import experiments

NUMBER_COUNTER = "todo_number"
LABEL_PREFIX = "T"
TITLE_MAX = 300
BODY_MAX = 50_000
EDITABLE_FIELDS = ("title", "body_md", "status", "intent", "priority", "assignee_kind", "project")
# What the experiment's kind is for a todo of each intent: engineering work needs no pod.
EXPERIMENT_KIND_OF_INTENT = {"engineering": "infra"}
_REF = re.compile(r"^\s*[Tt]?\s*(\d{1,9})\s*$")
_SHORTHAND = re.compile(r"\s*[Tt]\d{1,9}\s*")


def label(number: int) -> str:
    """A todo as people and agents cite it: "T12"."""
    return f"{LABEL_PREFIX}{number}"


def render_body(text: str | None) -> str:
    """A todo's body as sanitized HTML."""
    return render_markdown(text or "")


# --- numbers and lookup ----------------------------------------------------------------

def next_number() -> int:
    """The next todo number, safe under concurrent creators (services.core.records.next_number)."""
    return records.next_number(NUMBER_COUNTER, Todo.number)


def parse_ref(ref) -> int | None:
    """"T12", "t12", "12" → 12; None for anything else."""
    match = _REF.match(str(ref)) if ref is not None else None
    return int(match.group(1)) if match else None


def find_todo(ref) -> Todo | None:
    """The todo "T12", 12 or its uuid names, or None."""
    number = parse_ref(ref)
    if number is not None:
        return db.session.scalar(sa.select(Todo).where(Todo.number == number))
    try:
        return db.session.get(Todo, uuid.UUID(str(ref).strip()))
    except ValueError:
        return None


def get_todo(ref) -> Todo:
    """A todo by "T12", 12 or its uuid; NotFound otherwise."""
    todo = find_todo(ref)
    if todo is None:
        raise NotFound(f"No todo {str(ref)[:40]}. Todos are named T<number>, e.g. T3.")
    return todo


# --- input -----------------------------------------------------------------------------

def _choice(value, name: str, choices) -> str:
    if value not in choices:
        raise ValidationError(f"{name} must be one of: {', '.join(choices)}.", field=name)
    return value


def _title(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("Give the todo a title (1–300 characters).", field="title")
    title = " ".join(value.split())
    if not input_shape.has_visible_text(title):
        raise ValidationError("Give the todo a title: this one has no visible character.", field="title")
    if len(title) > TITLE_MAX:
        raise ValidationError(f"The title is too long: {len(title)} characters; the limit is {TITLE_MAX}.",
                              field="title")
    return title


def _body(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError("body_md must be text.", field="body_md")
    if len(value) > BODY_MAX:
        raise ValidationError(f"The body is too long: {len(value):,} characters; the limit is {BODY_MAX:,}.",
                              field="body_md")
    check_markdown_nesting(value)
    # Browsers send textareas with CRLF line ends; stored text uses LF.
    return value.replace("\r\n", "\n").strip()


def clean_fields(data: dict, *, partial: bool = False) -> dict:
    """The todo fields of `data`, checked; `partial` for an edit (only what was sent). A new
    todo needs only a title: it lands in the inbox, exploratory, normal priority, for a human."""
    unknown = sorted(str(name) for name in set(data) - set(EDITABLE_FIELDS))
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}.", field=unknown[0])
    defaults = {} if partial else {"status": "inbox", "intent": "exploratory", "priority": "normal",
                                   "assignee_kind": "human"}
    cleaned: dict = {}
    if not partial or "title" in data:
        cleaned["title"] = _title(data.get("title"))
    if not partial or "body_md" in data:
        cleaned["body_md"] = _body(data.get("body_md"))
    for name, choices in (("status", registry.TODO_STATUSES), ("intent", registry.TODO_INTENTS),
                          ("priority", registry.PRIORITIES), ("assignee_kind", registry.ASSIGNEE_KINDS)):
        if name in data or not partial:
            value = data.get(name)
            cleaned[name] = _choice(defaults[name] if value in (None, "") and not partial else value, name,
                                    choices)
    if "project" in data:
        project = beliefs.find_project(data.get("project"))
        cleaned["project_id"] = project.id if project else None
    return cleaned


# --- create and edit -------------------------------------------------------------------

def create_todo(data: dict, actor: Actor) -> Todo:
    """A new todo with the next number (in the inbox unless `status` says otherwise); the caller commits."""
    cleaned = clean_fields(data)
    todo = Todo(id=uuid.uuid4(), number=next_number(), **cleaned)
    db.session.add(todo)
    db.session.flush()
    return todo


def propose_for_member(data: dict, project_slug: str, member_id, actor: Actor) -> Todo:
    """An invited collaborator's todo for their project (the caller checked they may): a
    title and a body, in the owner's inbox, marked as theirs. The caller commits."""
    fields = {key: value for key, value in data.items() if key in ("title", "body_md") and value is not None}
    todo = create_todo({**fields, "project": project_slug, "status": "inbox"}, actor)
    todo.proposed_by_member_id = member_id
    return todo


def update_todo(todo: Todo, data: dict, actor: Actor) -> list[str]:
    """Apply an edit (only the fields sent); answers the names of the fields that changed."""
    cleaned = clean_fields(data, partial=True)
    changed = [name for name, value in cleaned.items() if getattr(todo, name) != value]
    for name in changed:
        setattr(todo, name, cleaned[name])
    return changed


def set_status(todo: Todo, status, actor: Actor) -> bool:
    """The list's quick status change; False when the todo already had it."""
    return bool(update_todo(todo, {"status": status}, actor))


# --- assigning to a collaborator (what waits on a member) -----------------------------

# A member may work on a todo assigned to them (see it, mark it done) only with this action.
WORK_ON_ASSIGNED = "work_on_assigned_todo"


def assignable_members(todo: Todo) -> list[User]:
    """The collaborators of the todo's project who are still members, by name: whom the owner
    may assign it to (none for a todo of no project)."""
    if todo.project_id is None:
        return []
    return list(db.session.scalars(
        sa.select(User).join(MemberProject, MemberProject.user_id == User.id)
        .where(MemberProject.project_id == todo.project_id, User.removed_at.is_(None))
        .order_by(sa.func.lower(User.display_name), User.email)
        .where(User.role.in_([role for role in registry.ACCOUNT_ROLES if permissions.role_may(role, WORK_ON_ASSIGNED)
                              and role != "owner"]))))


def assign(todo: Todo, member_id, actor: Actor) -> bool:
    """Assign the todo to a collaborator of its project, or take the assignment back (an empty
    `member_id`). Refused, changing nothing, for a mentor, a removed member, the owner, someone
    not on the todo's project and a todo of no project. Answers whether anything changed."""
    if member_id in (None, ""):
        changed = todo.assigned_member_id is not None
        todo.assigned_member_id = None
        return changed
    try:
        member = db.session.get(User, uuid.UUID(str(member_id).strip()))
    except ValueError:
        member = None
    if member is None or member.role == "owner":
        raise ValidationError("Choose a collaborator of this todo's project to assign it to.", field="member")
    if member.removed_at is not None:
        raise ValidationError(f"{member.display_name} was removed; a removed member cannot be assigned a todo.",
                              field="member")
    if not permissions.role_may(member.role, WORK_ON_ASSIGNED):
        raise ValidationError(f"{member.display_name} is a {member.role}: only collaborators work on todos.",
                              field="member")
    if todo.project_id is None:
        raise ValidationError("Give the todo a project first: it is assigned to a collaborator of its project.",
                              field="member")
    if not permissions.can(member, WORK_ON_ASSIGNED, todo):
        raise ValidationError(f"{member.display_name} is not on this todo's project.", field="member")
    changed = todo.assigned_member_id != member.id
    todo.assigned_member_id = member.id
    return changed


def assigned_to(account, number: int) -> Todo:
    """The todo `number` if it is assigned to `account` and in a project it still works on;
    NotFound otherwise — the same for another's todo, another project's and one that does not exist."""
    todo = db.session.scalar(sa.select(Todo).where(Todo.number == number, Todo.assigned_member_id == account.id))
    if todo is None or not permissions.can(account, WORK_ON_ASSIGNED, todo):
        raise NotFound(f"No todo {label(number)} waits on you.")
    return todo


def mark_done_by_member(todo: Todo, actor: Actor) -> bool:
    """The assigned collaborator's one action: done (the caller found it with `assigned_to`).
    False when it was already done; a cancelled or archived todo is the owner's to reopen."""
    if todo.status == "done":
        return False
    if todo.status in registry.TODO_CLOSED_STATUSES:
        raise Conflict(f"{label(todo.number)} is {todo.status}; it no longer waits on you.", code="todo_closed")
    todo.status = "done"
    return True


# --- making an experiment --------------------------------------------------------------

def experiment_of(todo: Todo) -> Experiment | None:
    """The experiment this todo became, if any."""
    return db.session.get(Experiment, todo.experiment_id) if todo.experiment_id else None


def make_experiment(todo: Todo, actor: Actor) -> tuple[Experiment, bool]:
    """Turn the todo into an experiment (title, body as its hypothesis, priority, project;
    engineering work as an infra experiment), link experiment —derives_from→ todo and
    move the todo to `planning`. Answers (experiment, True) when it made one; (its experiment,
    False) when the todo already became one, so a second press or a retried call makes none."""
    # Lock the todo's row first: two presses that arrive together take turns here, and the
    # second one finds the first one's experiment instead of making its own.
    db.session.refresh(todo, with_for_update=True)
    existing = experiment_of(todo)
    if existing is not None:
        return existing, False
    if todo.status in registry.TODO_CLOSED_STATUSES:
        raise Conflict(f"{label(todo.number)} is {todo.status}; reopen it before making it an experiment.",
                       code="todo_closed")
    # Not the todo's assignee: a todo "for a person" is the owner's errand, while the experiment
    # it becomes is worked through the pipeline like any other (the experiment's default).
    fields = {"title": todo.title, "priority": todo.priority,
              "kind": EXPERIMENT_KIND_OF_INTENT.get(todo.intent, "experiment")}
    if todo.body_md:
        fields["hypothesis"] = todo.body_md
    if todo.project_id:
        fields["project_id"] = str(todo.project_id)
    experiment = experiments.create_experiment(fields, actor, note=f"Made from todo {label(todo.number)}.")
    links.create_link(links.describe("experiment", experiment), "derives_from", links.describe("todo", todo),
                      actor, note="Made from this todo.")
    todo.experiment_id = experiment.id
    todo.status = "planning"
    return experiment, True


# --- following the experiment ----------------------------------------------------------

# A todo made into an experiment moves with it (docs/decisions.md, "Todos follow their
# experiment"): the experiment's status → the todo's. Every experiment status has one.
TODO_STATUS_OF_EXPERIMENT = {
    # Still being shaped: asked, clarified, planned, waiting for approval.
    **dict.fromkeys(("proposed", "clarifying", "awaiting_clarifications", "gate_pending", "planning",
                     "plan_pending", "awaiting_approval"), "planning"),
    # Approved and waiting for its turn.
    **dict.fromkeys(("approved", "queued"), "open"),
    # The code being written and tested.
    **dict.fromkeys(("implementing", "code_reviewing", "testing"), "in_progress"),
    **dict.fromkeys(("running", "uploading", "verifying"), "running"),
    **dict.fromkeys(("interpreting", "clean_result_drafting", "followups_running", "reviewing"), "interpreting"),
    "awaiting_promotion": "awaiting_promotion",
    "blocked": "blocked",
    **dict.fromkeys(("shared", "completed", "done_experiment", "done_impl"), "done"),
    # Ended without a result: the todo was not done, and is closed with its experiment.
    **dict.fromkeys(("failed", "cancelled", "archived"), "cancelled"),
}


def follow_experiment(experiment: Experiment, to: str) -> None:
    """In the move's transaction: the todo that became `experiment` takes the status that
    matches `to` — unless the owner archived the todo, which then stays put."""
    status = TODO_STATUS_OF_EXPERIMENT[to]
    db.session.execute(sa.update(Todo).where(Todo.experiment_id == experiment.id, Todo.status != "archived",
                                             Todo.status != status)
                       .values(status=status, updated_at=utcnow()).execution_options(synchronize_session="fetch"))


# --- reading ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TodoFilters:
    project: str = ""
    status: str = ""
    intent: str = ""

    @classmethod
    def from_args(cls, args) -> "TodoFilters":
        """Filters from a query string; unknown values are dropped, not errors."""
        status, intent = args.get("status", ""), args.get("intent", "")
        return cls(project=(args.get("project") or "").strip()[:80],
                   status=status if status in registry.TODO_STATUSES else "",
                   intent=intent if intent in registry.TODO_INTENTS else "")

    @property
    def active(self) -> bool:
        return bool(self.project or self.status or self.intent)


_PRIORITY_FIRST = sa.case({p: rank for rank, p in enumerate(reversed(registry.PRIORITIES))}, value=Todo.priority)


def todo_list(filters: TodoFilters = TodoFilters(), *, limit: int = 500) -> list[Todo]:
    """Todos by project (slug), status and intent: most urgent first, then newest."""
    query = sa.select(Todo)
    if filters.project:
        query = query.join(Project, Project.id == Todo.project_id).where(Project.slug == filters.project)
    if filters.status:
        query = query.where(Todo.status == filters.status)
    if filters.intent:
        query = query.where(Todo.intent == filters.intent)
    return list(db.session.scalars(query.order_by(_PRIORITY_FIRST, Todo.number.desc()).limit(limit)))


@dataclass(frozen=True)
class StatusGroup:
    status: str
    todos: list[Todo]


def grouped(todos: list[Todo]) -> list[StatusGroup]:
    """The todos in groups by status, in the registry's order (the inbox first); empty groups left out."""
    by_status: dict[str, list[Todo]] = {}
    for todo in todos:
        by_status.setdefault(todo.status, []).append(todo)
    return [StatusGroup(status, by_status[status]) for status in registry.TODO_STATUSES if status in by_status]


def experiment_numbers(todos) -> dict:
    """Experiment id → number for the experiments these todos became."""
    return {key: number for key, (number, _status) in experiments_of(todos).items()}


def experiments_of(todos) -> dict:
    """Experiment id → (number, status) for the experiments these todos became, in one query."""
    ids = {t.experiment_id for t in todos if t.experiment_id}
    if not ids:
        return {}
    rows = db.session.execute(sa.select(Experiment.id, Experiment.number, Experiment.status)
                              .where(Experiment.id.in_(ids))).all()
    return {key: (number, status) for key, number, status in rows}


# --- typed links -----------------------------------------------------------------------

links.register("todo", links.Resolver(
    "todo", lambda todo_id: db.session.get(Todo, todo_id), lambda t: f"{label(t.number)} {t.title}",
    lambda t: f"/todos/{t.number}", find_todo, model=Todo))
# "T12" typed without "todo:" (a bare "12" stays an experiment's number).
links.register_shorthand("todo", lambda text: find_todo(text) if _SHORTHAND.fullmatch(text) else None)
