"""Todos (SPEC §12.2): list, create, read, patch, and make one an experiment.

A todo's `ref` is "T12", 12 or its uuid. Making an experiment is what creating one is, so it
takes the same scope (`write`); asking again answers the experiment the todo already became
(200, `created: false`) instead of making a second one.
"""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, id_text, int_arg, iso
from blueprints.api.beliefs import link_json
from blueprints.api.experiments import experiment_summary
from models.day import Todo
from services.core import registry
from services.core.errors import ValidationError
from services.day import todos
from services.research import beliefs, links

routes = Routes()


def todo_json(t: Todo, experiment_number: int | None = None) -> dict:
    return {"id": str(t.id), "number": t.number, "cite": todos.label(t.number), "title": t.title,
            "bodyMd": t.body_md, "status": t.status, "intent": t.intent, "priority": t.priority,
            "assigneeKind": t.assignee_kind, "projectId": id_text(t.project_id),
            "experimentId": id_text(t.experiment_id), "experimentNumber": experiment_number,
            "createdAt": iso(t.created_at), "updatedAt": iso(t.updated_at)}


def _one_of(name: str, choices) -> str:
    value = request.args.get(name) or ""
    if value and value not in choices:
        raise ValidationError(f"{name} must be one of: {', '.join(choices)}.", field=name)
    return value


@routes.get("/todos")
@access.api("read")
def list_todos():
    """Todos, most urgent first then newest; `project` (slug), `status`, `intent`, `limit` 1–500."""
    if request.args.get("project"):
        beliefs.find_project(request.args["project"])
    filters = todos.TodoFilters(project=request.args.get("project") or "",
                                status=_one_of("status", registry.TODO_STATUSES),
                                intent=_one_of("intent", registry.TODO_INTENTS))
    found = todos.todo_list(filters, limit=int_arg("limit", 100, 1, 500))
    numbers = todos.experiment_numbers(found)
    return {"todos": [todo_json(t, numbers.get(t.experiment_id)) for t in found]}


@routes.post("/todos")
@access.api("write")
def create_todo():
    """Create a todo (`title` required; it lands in the inbox); answers 201 with it."""
    todo = todos.create_todo(body_fields(todos.EDITABLE_FIELDS), access.actor())
    commit_then_run()
    return {"todo": todo_json(todo)}, 201


def _experiment_number(todo: Todo) -> int | None:
    experiment = todos.experiment_of(todo)
    return experiment.number if experiment else None


@routes.get("/todos/<ref>")
@access.api("read")
def get_todo(ref: str):
    """One todo with its links both ways."""
    todo = todos.get_todo(ref)
    outgoing, incoming = links.links_of("todo", todo.id)
    return {"todo": todo_json(todo, _experiment_number(todo)),
            "links": {"outgoing": [link_json(r.link) for r in outgoing],
                      "incoming": [link_json(r.link) for r in incoming]}}


@routes.patch("/todos/<ref>")
@access.api("write")
def patch_todo(ref: str):
    """Edit a todo's fields (only those sent); answers which changed."""
    todo = todos.get_todo(ref)
    changed = todos.update_todo(todo, body_fields(todos.EDITABLE_FIELDS), access.actor())
    commit_then_run()
    return {"ok": True, "changed": sorted(changed), "todo": todo_json(todo, _experiment_number(todo))}


@routes.post("/todos/<ref>/experiment")
@access.api("write")
def make_todo_experiment(ref: str):
    """Make the todo an experiment: 201 with the new one, or 200 with the one it already became."""
    todo = todos.get_todo(ref)
    experiment, created = todos.make_experiment(todo, access.actor())
    commit_then_run()
    return {"created": created, "experiment": experiment_summary(experiment),
            "todo": todo_json(todo, experiment.number)}, 201 if created else 200
