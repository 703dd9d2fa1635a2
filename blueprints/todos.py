"""Todos (SPEC §12.2): the list grouped by status with quick add and quick status changes in
place, a todo's page (edit every field, its links), and "Make it an experiment". Views are
thin; services.day.todos does the work.

A refused form is shown again with the sentence and what the owner typed, at the refusal's
status (422 for bad input, 409 for a closed todo); an htmx status change answers the list
with the sentence at 200, because htmx swaps only 2xx answers."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for
from markupsafe import Markup

from blueprints import access
from blueprints._actions import perform
from blueprints._htmx import is_fragment_request, render
from models.day import Todo
from services.core import registry
from services.core.errors import SaganError, ValidationError
from services.day import todos
from services.research import beliefs

bp = Blueprint("todos", __name__)

FORM_FIELDS = ("title", "body_md", "status", "intent", "priority", "assignee_kind", "project")


def markdown(text: str | None) -> Markup:
    """A todo's body as sanitized HTML (services.core.sanitize is the only maker)."""
    return Markup(todos.render_body(text))


def init_app(app) -> None:
    app.add_template_filter(markdown, "todo_markdown")
    app.add_template_global(todos.label, "todo_label")


def _status(exc: SaganError) -> int:
    return 422 if isinstance(exc, ValidationError) else exc.status_code


def _filter_args(filters: todos.TodoFilters) -> dict:
    return {name: value for name, value in (("project", filters.project), ("status", filters.status),
                                            ("intent", filters.intent)) if value}


def _list_page(*, error: SaganError | None = None, quick_title: str = "", row_error: tuple | None = None,
               status: int = 200):
    """The list page, or its list fragment for an htmx swap."""
    filters = todos.TodoFilters.from_args(request.args)
    found = todos.todo_list(filters)
    return render("todos/index.html", "todos/_list.html", status=status, groups=todos.grouped(found),
                  total=len(found), filters=filters, filter_args=_filter_args(filters),
                  project_of=beliefs.projects_by_id(t.project_id for t in found),
                  experiment_of=todos.experiments_of(found), error=error, quick_title=quick_title,
                  row_error=row_error, statuses=registry.TODO_STATUSES, intents=registry.TODO_INTENTS,
                  projects=beliefs.project_choices(), headers={"Cache-Control": "no-store"})


@bp.get("/todos")
@access.owner
def index():
    """Todos grouped by status (the inbox first), filtered by project, status and intent."""
    return _list_page()


@bp.post("/todos")
@access.owner
def create():
    """Quick add: a title is enough; the todo lands in the inbox (once per form key)."""
    title = request.form.get("title", "")
    return perform(lambda: todos.create_todo({"title": title}, access.actor()),
                   done=lambda: redirect(url_for("todos.index", **request.args), code=303),
                   refused=lambda exc: _list_page(error=exc, quick_title=title, status=_status(exc)))


@bp.post("/todos/<int:number>/status")
@access.owner
def change_status(number: int):
    """The list's quick status change: the list again (htmx), or back to it (a plain post)."""
    todo = todos.get_todo(number)

    def refused(exc: SaganError):
        # htmx swaps only 2xx answers: the sentence comes back beside the row at 200.
        return _list_page(row_error=(number, exc), status=200 if is_fragment_request() else _status(exc))

    def done():
        if is_fragment_request():
            return _list_page()
        return redirect(url_for("todos.index", **request.args) + f"#todo-{number}", code=303)

    return perform(lambda: todos.set_status(todo, request.form.get("status", ""), access.actor()),
                   done=done, refused=refused, keyed=False)


def _form_of(todo: Todo) -> dict:
    project = beliefs.projects_by_id([todo.project_id]).get(todo.project_id)
    return {"title": todo.title, "body_md": todo.body_md, "status": todo.status, "intent": todo.intent,
            "priority": todo.priority, "assignee_kind": todo.assignee_kind,
            "project": project.slug if project else ""}


def _page(todo: Todo, *, error: SaganError | None = None, form: dict | None = None, status: int = 200,
          assign_error: SaganError | None = None, assign_choice: str | None = None):
    project = beliefs.projects_by_id([todo.project_id]).get(todo.project_id)
    body = render_template(
        "todos/detail.html", todo=todo, project=project, experiment=todos.experiment_of(todo), error=error,
        assignable=todos.assignable_members(todo), assign_error=assign_error,
        assign_choice=str(todo.assigned_member_id or "") if assign_choice is None else assign_choice,
        form=form or _form_of(todo), statuses=registry.TODO_STATUSES, intents=registry.TODO_INTENTS,
        priorities=registry.PRIORITIES, assignee_kinds=registry.ASSIGNEE_KINDS,
        projects=beliefs.project_choices(todo.project_id), closed=registry.TODO_CLOSED_STATUSES)
    return body, status, {"Cache-Control": "no-store"}


@bp.get("/todos/<int:number>")
@access.owner
def detail(number: int):
    """One todo: its fields to edit, its links both ways, and the experiment it became."""
    return _page(todos.get_todo(number))


@bp.post("/todos/<int:number>/edit")
@access.owner
def edit(number: int):
    """Save the todo's fields; a refusal shows the form again with what was typed."""
    todo = todos.get_todo(number)
    form = {name: request.form.get(name, "") for name in FORM_FIELDS}
    return perform(lambda: todos.update_todo(todo, form, access.actor()),
                   done=lambda: redirect(url_for("todos.detail", number=number), code=303),
                   refused=lambda exc: _page(todos.get_todo(number), error=exc, form=form, status=_status(exc)))


@bp.post("/todos/<int:number>/assign")
@access.owner
def assign(number: int):
    """Assign the todo to a collaborator of its project (it waits on them, on their /welcome), or
    take it back (an empty choice). A mentor, a removed member or someone not on the project is
    refused with the sentence and nothing changes."""
    todo = todos.get_todo(number)
    member = request.form.get("member", "")
    return perform(lambda: todos.assign(todo, member, access.actor()), keyed=False,
                   done=lambda: redirect(url_for("todos.detail", number=number) + "#assign", code=303),
                   refused=lambda exc: _page(todos.get_todo(number), assign_error=exc, assign_choice=member,
                                             status=_status(exc)))


@bp.post("/todos/<int:number>/experiment")
@access.owner
def make_experiment(number: int):
    """Make the todo an experiment and go to it; a second press goes to the same experiment."""
    todo = todos.get_todo(number)

    def done():
        # Also the answer to a repeated form key, which ran nothing: the todo knows its experiment.
        experiment = todos.experiment_of(todos.get_todo(number))
        if experiment is None:
            return redirect(url_for("todos.detail", number=number), code=303)
        return redirect(url_for("experiments.detail", number=experiment.number), code=303)

    return perform(lambda: todos.make_experiment(todo, access.actor()), done=done,
                   refused=lambda exc: _page(todos.get_todo(number), error=exc, status=_status(exc)))
