"""Todos (SPEC §12.2): the list grouped by status with quick add, filters and quick status
changes in place, a todo's page and its edit form, "Make it an experiment" (once, however often
it is pressed), and typed links to todos ("T12")."""
from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from models import Experiment, db
from models.day import Todo
from models.research import Project, RecordLink
from services.core.actors import Actor
from services.core.errors import NotFound
from services.day import todos
from services.research import links
from services.workflow import experiments
from tests.conftest import csrf_from

OWNER = Actor("owner", None, "Ada")


@pytest.fixture
def make_todo(app):
    """Factory: a todo made through the service, as the owner; answers its number."""
    def make(title="Try the ablation without the system prompt", **fields):
        with app.app_context():
            todo = todos.create_todo({"title": title, **fields}, OWNER)
            db.session.commit()
            return todo.number
    return make


@pytest.fixture
def make_project(app):
    def make(slug="emergent", title="Emergent misalignment"):
        with app.app_context():
            db.session.add(Project(slug=slug, title=title))
            db.session.commit()
        return slug
    return make


def _todo(app, number) -> Todo:
    with app.app_context():
        db.session.expire_all()
        todo = todos.get_todo(number)
        db.session.expunge(todo)
        return todo


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def _form_key(html: str, action: str) -> str:
    form = re.search(rf'<form[^>]*action="{re.escape(action)}"[^>]*>(.*?)</form>', html, re.S)
    assert form, f"no form posts to {action}"
    return re.search(r'name="form_key" value="([^"]+)"', form.group(1)).group(1)


# --- the list --------------------------------------------------------------------------

def test_the_list_has_an_empty_state_and_the_quick_add(client, owner):
    """With no todos, does /todos say so, offer the quick add, and sit in the nav?"""
    page = client.get("/todos")
    assert page.status_code == 200
    assert "No todos yet" in page.text and 'action="/todos"' in page.text
    assert 'href="/todos" aria-current="page"' in page.text


def test_quick_add_puts_a_title_in_the_inbox_once(app, client, owner):
    """Does a title alone make T1 in the inbox (exploratory, normal, for a person), and does the
    same post twice make one todo?"""
    page = client.get("/todos").text
    data = {"csrf_token": csrf_from(page), "form_key": _form_key(page, "/todos"), "title": "  Read the  paper "}
    first = client.post("/todos", data=data)
    second = client.post("/todos", data=data)
    assert first.status_code == second.status_code == 303
    assert _count(app, Todo) == 1
    todo = _todo(app, "T1")
    assert (todo.title, todo.status, todo.intent, todo.priority, todo.assignee_kind) == \
        ("Read the paper", "inbox", "exploratory", "normal", "human")
    listed = client.get("/todos").text
    assert "T1" in listed and "Read the paper" in listed and "Inbox" in listed


@pytest.mark.parametrize("title, message", [("", "Give the todo a title"), ("   ", "Give the todo a title"),
                                            ("\u200b\u200b", "no visible character"),
                                            ("x" * 301, "The title is too long")])
def test_a_bad_quick_add_is_refused_with_the_title_kept(app, client, owner, title, message):
    """Is an empty, invisible or too long title a 422 with its sentence, nothing created?"""
    page = client.get("/todos").text
    response = client.post("/todos", data={"csrf_token": csrf_from(page), "title": title})
    assert response.status_code == 422 and message in response.text
    assert _count(app, Todo) == 0


def test_the_list_groups_by_status_with_the_inbox_first(client, owner, make_todo):
    """Are todos shown in groups in the registry's order (inbox before open before done)?"""
    make_todo("Finished thing", status="done")
    make_todo("Open thing", status="open")
    make_todo("New thing")
    text = client.get("/todos").text
    assert text.index("todo-group-inbox") < text.index("todo-group-open") < text.index("todo-group-done")
    assert text.index("New thing") < text.index("Open thing") < text.index("Finished thing")


def test_the_filters_narrow_the_list(client, owner, make_todo, make_project):
    """Do project, status and intent filter, say so when nothing matches, and drop unknown values?"""
    slug = make_project()
    make_todo("In the project", project=slug, intent="replication")
    make_todo("Elsewhere", intent="engineering", status="open")
    assert "In the project" in client.get(f"/todos?project={slug}").text
    assert "Elsewhere" not in client.get(f"/todos?project={slug}").text
    by_intent = client.get("/todos?intent=engineering").text
    assert "Elsewhere" in by_intent and "In the project" not in by_intent
    assert "In the project" not in client.get("/todos?status=open").text
    assert "No todo matches these filters" in client.get("/todos?status=blocked").text
    assert client.get("/todos?status=bogus&intent=nope").status_code == 200


def test_the_filters_swap_only_the_list_with_htmx(htmx_client, make_todo):
    """Does an htmx filter request answer the list fragment alone (and Vary on HX-Request)?"""
    make_todo("Filtered", status="open")
    response = htmx_client.get("/todos?status=open")
    assert response.status_code == 200 and response.text.lstrip().startswith('<div id="todo-list">')
    assert "<html" not in response.text
    assert "Filtered" in response.text and "HX-Request" in response.headers["Vary"]


def test_a_quick_status_change_swaps_the_list_in_place(app, htmx_client, make_todo):
    """Does the row's status select (htmx) move the todo and answer the list, keeping the filters?"""
    number = make_todo("Scope me")
    response = htmx_client.post(f"/todos/{number}/status?intent=exploratory",
                                data={"csrf_token": htmx_client.csrf, "status": "scoped"})
    assert response.status_code == 200 and '<div id="todo-list">' in response.text
    assert "todo-group-scoped" in response.text and "<html" not in response.text
    assert f"/todos/{number}/status?intent=exploratory" in response.text
    assert _todo(app, number).status == "scoped"


def test_a_quick_status_change_without_javascript_comes_back(app, client, owner, make_todo):
    """Without htmx, does the status post redirect back to the list at the todo's row?"""
    number = make_todo()
    page = client.get("/todos").text
    response = client.post(f"/todos/{number}/status", data={"csrf_token": csrf_from(page), "status": "open"})
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/todos#todo-{number}")
    assert _todo(app, number).status == "open"


def test_an_unknown_quick_status_is_refused_beside_the_row(app, client, htmx_client, make_todo):
    """Is an unknown status refused (htmx: 200 with the sentence in the list; plain: 422), nothing changed?"""
    number = make_todo()
    swapped = htmx_client.post(f"/todos/{number}/status", data={"csrf_token": htmx_client.csrf, "status": "maybe"})
    assert swapped.status_code == 200 and "status must be one of" in swapped.text
    plain = htmx_client.post(f"/todos/{number}/status", data={"csrf_token": htmx_client.csrf, "status": ""},
                             headers={"HX-Request": "false"})
    assert plain.status_code == 422 and "status must be one of" in plain.text
    assert _todo(app, number).status == "inbox"
    assert htmx_client.post("/todos/99/status", data={"csrf_token": htmx_client.csrf,
                                                     "status": "open"}).status_code == 404


# --- a todo's page ---------------------------------------------------------------------

def test_the_todo_page_edits_every_field(app, client, owner, make_todo, make_project):
    """Does the edit form save title, body, status, intent, priority, assignee and project, and show them?"""
    slug = make_project()
    number = make_todo()
    page = client.get(f"/todos/{number}")
    assert page.status_code == 200 and "Make it an experiment" in page.text and 'id="links"' in page.text
    response = client.post(f"/todos/{number}/edit", data={
        "csrf_token": csrf_from(page.text), "title": "Replicate the 2024 result", "body_md": "Three **seeds**.",
        "status": "scoped", "intent": "replication", "priority": "high", "assignee_kind": "agent", "project": slug})
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/todos/{number}")
    todo = _todo(app, number)
    assert (todo.title, todo.body_md, todo.status, todo.intent, todo.priority, todo.assignee_kind) == \
        ("Replicate the 2024 result", "Three **seeds**.", "scoped", "replication", "high", "agent")
    assert todo.project_id is not None
    shown = client.get(f"/todos/{number}").text
    assert "<strong>seeds</strong>" in shown and "Emergent misalignment" in shown


@pytest.mark.parametrize("field, value, message", [
    ("title", "", "Give the todo a title"),
    ("status", "someday", "status must be one of"),
    ("intent", "curiosity", "intent must be one of"),
    ("priority", "asap", "priority must be one of"),
    ("assignee_kind", "robot", "assignee_kind must be one of"),
    ("project", "no-such-project", "No project with the slug no-such-project"),
    ("body_md", "x" * (5 * 1024 * 1024), None),
    ("body_md", "x" * 50_001, "The body is too long"),
    ("body_md", "> " * 200 + "deep", "nest"),
])
def test_a_bad_edit_is_refused_with_the_form_kept(app, client, owner, make_todo, field, value, message):
    """Is each bad field refused with its sentence (a 5 MB body at the door), the typed text kept, nothing changed?"""
    number = make_todo("Unchanged")
    page = client.get(f"/todos/{number}")
    data = {"csrf_token": csrf_from(page.text), "title": "Typed title", "body_md": "kept text", "status": "open",
            "intent": "exploratory", "priority": "normal", "assignee_kind": "human", "project": ""} | {field: value}
    response = client.post(f"/todos/{number}/edit", data=data)
    if message is None:
        assert response.status_code == 413
    else:
        assert response.status_code == 422 and message in response.text
        assert "Typed title" in response.text or field == "title"
    todo = _todo(app, number)
    assert (todo.title, todo.status, todo.body_md) == ("Unchanged", "inbox", "")


def test_an_unknown_todo_is_a_404(client, owner):
    """Does /todos/99 answer 404?"""
    assert client.get("/todos/99").status_code == 404


# --- make it an experiment -------------------------------------------------------------

def test_make_it_an_experiment_creates_links_and_moves_the_todo(app, client, owner, make_todo, make_project):
    """Does one press make a proposed experiment with the todo's title, body, priority and project,
    link experiment —derives_from→ todo, move the todo to planning and land on the experiment?"""
    slug = make_project()
    number = make_todo("Does the effect hold at 1B?", body_md="It should.", priority="urgent", project=slug,
                       status="scoped")
    page = client.get(f"/todos/{number}").text
    response = client.post(f"/todos/{number}/experiment", data={
        "csrf_token": csrf_from(page), "form_key": _form_key(page, f"/todos/{number}/experiment")})
    assert response.status_code == 303
    with app.app_context():
        experiment = db.session.scalars(sa.select(Experiment)).one()
        assert response.headers["Location"].endswith(f"/experiments/{experiment.number}")
        assert (experiment.title, experiment.hypothesis, experiment.priority, experiment.status, experiment.kind) == \
            ("Does the effect hold at 1B?", "It should.", "urgent", "proposed", "experiment")
        assert experiment.project_id == todos.get_todo(number).project_id
        link = db.session.scalars(sa.select(RecordLink)).one()
        assert (link.source_kind, link.source_id, link.kind, link.target_kind) == \
            ("experiment", experiment.id, "derives_from", "todo")
        experiment_number = experiment.number
    todo = _todo(app, number)
    assert todo.status == "planning" and todo.experiment_id is not None
    shown = client.get(f"/todos/{number}").text
    assert "This todo became" in shown and f"/experiments/{experiment_number}" in shown
    assert "Make it an experiment" not in shown
    assert f"T{number}" in client.get(f"/experiments/{experiment_number}").text  # its links panel
    assert f"#{experiment_number} · proposed" in client.get("/todos").text


def test_pressing_make_it_an_experiment_twice_makes_one(app, client, owner, make_todo):
    """The same post twice, and a fresh press from a reloaded page: is there still one experiment
    and one link, each answer landing on it?"""
    number = make_todo()
    page = client.get(f"/todos/{number}").text
    data = {"csrf_token": csrf_from(page), "form_key": _form_key(page, f"/todos/{number}/experiment")}
    first = client.post(f"/todos/{number}/experiment", data=data)
    second = client.post(f"/todos/{number}/experiment", data=data)
    fresh = client.post(f"/todos/{number}/experiment", data={"csrf_token": data["csrf_token"],
                                                             "form_key": "a-fresh-key-from-another-tab"})
    assert first.status_code == second.status_code == fresh.status_code == 303
    assert first.headers["Location"] == second.headers["Location"] == fresh.headers["Location"]
    assert _count(app, Experiment) == 1 and _count(app, RecordLink) == 1


def test_two_presses_at_once_make_one_experiment(app, make_todo):
    """Two requests that make the same todo an experiment at the same moment (no shared form
    key): does the row lock make the second find the first one's experiment?"""
    number = make_todo()
    both_ready = threading.Barrier(2)

    def press():
        with app.app_context():
            todo = todos.get_todo(number)
            both_ready.wait(timeout=10)
            experiment, created = todos.make_experiment(todo, OWNER)
            db.session.commit()
            return experiment.number, created

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda _: press(), range(2)))
    assert len({number for number, _created in answers}) == 1
    assert sorted(created for _number, created in answers) == [False, True]
    assert _count(app, Experiment) == 1 and _count(app, RecordLink) == 1


def test_an_engineering_todo_becomes_an_infra_experiment(app, make_todo):
    """Does an engineering todo become a pod-free infra experiment (with no hypothesis when it has no body)?"""
    number = make_todo("Cache the tokenizer", intent="engineering", assignee_kind="agent")
    with app.app_context():
        experiment, created = todos.make_experiment(todos.get_todo(number), OWNER)
        db.session.commit()
        assert created and experiment.kind == "infra"
        assert experiment.hypothesis is None


def test_a_closed_todo_cannot_become_an_experiment(app, client, owner, make_todo):
    """Is a done todo refused (409, with the sentence on its page) and nothing made?"""
    number = make_todo(status="done")
    page = client.get(f"/todos/{number}").text
    assert "Make it an experiment" not in page and "Reopen it" in page
    response = client.post(f"/todos/{number}/experiment", data={"csrf_token": csrf_from(page)})
    assert response.status_code == 409 and "reopen it before making it an experiment" in response.text
    assert _count(app, Experiment) == 0 and _todo(app, number).status == "done"


# --- typed links -----------------------------------------------------------------------

def test_a_todo_is_named_t12_in_links(app, make_todo, make_experiment):
    """Does "T1" name the todo (label, page), "T99" a clear 404, and can a belief-free link be made to it?"""
    number = make_todo("Linked todo")
    experiment_number = make_experiment("Evidence")
    with app.app_context():
        ref = links.parse_reference(f"t{number}")
        assert (ref.kind, ref.label, ref.url) == ("todo", f"T{number} Linked todo", f"/todos/{number}")
        assert links.parse_reference(f"todo:{ref.id}").id == ref.id
        with pytest.raises(NotFound, match="No todo T99"):
            links.parse_reference("T99")
        experiment = links.describe("experiment", experiments.get_experiment(experiment_number))
        links.create_link(ref, "blocks", experiment, OWNER)
        db.session.commit()
        outgoing, incoming = links.links_of("experiment", experiment.id)
        assert incoming[0].other_label == f"T{number} Linked todo"


def test_the_links_panel_on_a_todo_page_adds_a_link(app, htmx_client, make_todo, make_experiment):
    """Does the todo page's panel link the todo to "#N" in place?"""
    number = make_todo()
    experiment_number = make_experiment("Evidence")
    todo_id = _todo(app, number).id
    response = htmx_client.post("/links", data={"csrf_token": htmx_client.csrf, "record_kind": "todo",
                                                "record_id": str(todo_id), "kind": "answers",
                                                "target": f"#{experiment_number}"})
    assert response.status_code == 200 and f"#{experiment_number} Evidence" in response.text
    assert _count(app, RecordLink) == 1
