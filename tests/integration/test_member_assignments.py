"""What waits on a member and the weekly reviews shown to mentor accounts (SPEC §13).
The owner assigns a todo of a project to a collaborator of that project; it waits on
them on /welcome, where they open it and mark it done. The owner shows a published weekly review
to mentor accounts; mentors list and read it as the mentor update. Everything else answers 404
as if it did not exist, and every refused form changes nothing."""
from __future__ import annotations

import uuid
from datetime import date

import pytest
import sqlalchemy as sa

from models import Todo, User, WeeklyReview, db
from services.core.actors import Actor
from services.day import todos, weekly_review
from tests.conftest import csrf_from

OWNER = Actor("owner", None, "Owner")


def _todo(app, title: str, project_id: str | None, priority: str = "normal") -> int:
    with app.app_context():
        todo = todos.create_todo({"title": title, "priority": priority}, OWNER)
        todo.project_id = uuid.UUID(project_id) if project_id else None
        db.session.commit()
        return todo.number


def _assigned(app, number: int):
    with app.app_context():
        return db.session.scalar(sa.select(Todo.assigned_member_id).where(Todo.number == number))


def _status(app, number: int) -> str:
    with app.app_context():
        return db.session.scalar(sa.select(Todo.status).where(Todo.number == number))


def _assign(client, number: int, member) -> object:
    page = client.get(f"/todos/{number}")
    return client.post(f"/todos/{number}/assign", data={"member": str(member or ""),
                                                        "csrf_token": csrf_from(page.text)})


def _post(member, page_path: str, path: str):
    page = member.get(page_path)
    return member.post(path, data={"csrf_token": csrf_from(page.text)})


# --- what waits on a member ------------------------------------------------------------------------

def test_the_owner_assigns_a_todo_and_it_waits_on_the_collaborator_until_done(app, client, two_projects,
                                                                             member_client):
    alpha, _beta = two_projects
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    number = _todo(app, "Rerun the ablation with seed 3", alpha, priority="high")
    page = client.get(f"/todos/{number}")
    assert "Assign to" in page.text and f'value="{ada.member_id}"' in page.text
    assert "Nothing waits on you" in ada.get("/welcome").text

    answer = _assign(client, number, ada.member_id)
    assert answer.status_code == 303 and _assigned(app, number) == ada.member_id
    assert "Assigned to <strong class=\"assigned-member\">ada</strong>" in client.get(f"/todos/{number}").text

    home = ada.get("/welcome").text
    assert home.index('id="waiting"') < home.index("<h2>Your projects")  # first on the page
    assert "Rerun the ablation with seed 3" in home and "Alpha project" in home
    assert f'href="/m/todos/{number}"' in home
    todo_page = ada.get(f"/m/todos/{number}")
    assert todo_page.status_code == 200 and "high priority" in todo_page.text and "Mark done" in todo_page.text

    done = _post(ada, f"/m/todos/{number}", f"/m/todos/{number}/done")
    assert done.status_code == 303 and done.headers["Location"].endswith("/welcome#waiting")
    assert _status(app, number) == "done"
    assert "Rerun the ablation" not in ada.get("/welcome").text
    # Marking it done again changes nothing and refuses nothing.
    assert _post(ada, f"/m/todos/{number}", f"/m/todos/{number}/done").status_code == 303


def test_unassigning_takes_it_off_their_list_and_their_page(app, client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    number = _todo(app, "Write the data card", two_projects[0])
    _assign(client, number, ada.member_id)
    assert "Write the data card" in ada.get("/welcome").text
    assert _assign(client, number, "").status_code == 303 and _assigned(app, number) is None
    assert "Write the data card" not in ada.get("/welcome").text
    assert ada.get(f"/m/todos/{number}").status_code == 404
    assert _post(ada, "/welcome", f"/m/todos/{number}/done").status_code == 404
    assert _status(app, number) == "inbox"


def test_assigning_is_refused_for_a_mentor_a_removed_member_another_project_and_no_project(
        app, client, two_projects, member_client):
    alpha, beta = two_projects
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    bob = member_client("bob@example.org", "collaborator", projects=(1,))
    mia = member_client("mia@example.org", "mentor", projects=(0,))
    gone = member_client("gone@example.org", "collaborator", projects=(0,))
    page = client.get("/settings/members")
    client.post(f"/settings/members/{gone.member_id}/remove", data={"csrf_token": csrf_from(page.text)})
    with app.app_context():
        assert db.session.get(User, gone.member_id).removed_at is not None
        owner_id = db.session.scalar(sa.select(User.id).where(User.role == "owner"))
    number = _todo(app, "Alpha errand", alpha)
    loose = _todo(app, "Errand of no project", None)

    listed = client.get(f"/todos/{number}").text
    assert str(ada.member_id) in listed
    assert not any(str(m) in listed for m in (bob.member_id, mia.member_id, gone.member_id))
    for member, sentence in ((mia.member_id, "only collaborators work on todos"),
                             (gone.member_id, "a removed member cannot be assigned"),
                             (bob.member_id, "is not on this todo&#39;s project"),
                             (owner_id, "Choose a collaborator of this todo"),
                             (uuid.uuid4(), "Choose a collaborator of this todo"),
                             ("not-a-uuid", "Choose a collaborator of this todo")):
        answer = _assign(client, number, member)
        assert answer.status_code == 422 and sentence in answer.text, (member, answer.text[:300])
        assert _assigned(app, number) is None
    answer = _assign(client, loose, ada.member_id)
    assert answer.status_code == 422 and "Give the todo a project first" in answer.text
    assert _assigned(app, loose) is None
    assert "Give this todo a project" in client.get(f"/todos/{loose}").text  # the empty state
    # Without a CSRF token: refused, nothing changed.
    assert client.post(f"/todos/{number}/assign", data={"member": str(ada.member_id)}).status_code == 400
    assert _assigned(app, number) is None


def test_others_todos_and_other_projects_answer_404(app, client, two_projects, member_client):
    alpha, beta = two_projects
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    cy = member_client("cy@example.org", "collaborator", projects=(0, 1))
    mine = _todo(app, "Errand for Ada", alpha)
    theirs = _todo(app, "Errand for Cy", alpha)
    beta_todo = _todo(app, "Beta errand", beta)
    _assign(client, mine, ada.member_id)
    _assign(client, theirs, cy.member_id)
    _assign(client, beta_todo, cy.member_id)
    for number in (theirs, beta_todo, 999_999):
        assert ada.get(f"/m/todos/{number}").status_code == 404, number
        assert _post(ada, "/welcome", f"/m/todos/{number}/done").status_code == 404, number
    assert _status(app, theirs) == _status(app, beta_todo) == "inbox"
    # A mark done without a CSRF token changes nothing.
    assert ada.post(f"/m/todos/{mine}/done").status_code == 400 and _status(app, mine) == "inbox"
    # Taken off the project, the assignment no longer reaches them (nothing of beta leaks).
    page = client.get("/settings/members")
    client.post(f"/settings/members/{cy.member_id}", data={"role": "collaborator", "projects": alpha,
                                                          "csrf_token": csrf_from(page.text)})
    assert cy.get(f"/m/todos/{beta_todo}").status_code == 404
    assert "Beta errand" not in cy.get("/welcome").text and "Errand for Cy" in cy.get("/welcome").text
    assert "no longer a collaborator of this todo" in client.get(f"/todos/{beta_todo}").text


def test_a_mentor_has_no_waiting_list_and_cannot_reach_the_todo_routes(app, client, two_projects, member_client):
    mia = member_client("mia@example.org", "mentor", projects=(0,))
    number = _todo(app, "Alpha errand", two_projects[0])
    assert 'id="waiting"' not in mia.get("/welcome").text
    assert mia.get(f"/m/todos/{number}").status_code == 403
    assert _post(mia, "/welcome", f"/m/todos/{number}/done").status_code == 403


def test_the_waiting_list_reads_in_a_constant_number_of_queries(app, client, two_projects, member_client):
    from tests.integration.queries import counting_queries
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    _assign(client, _todo(app, "First errand", two_projects[0]), ada.member_id)
    ada.get("/welcome")
    with counting_queries() as few:
        ada.get("/welcome")
    with app.app_context():
        for i in range(15):
            todo = todos.create_todo({"title": f"Errand {i}"}, OWNER)
            todo.project_id, todo.assigned_member_id = uuid.UUID(two_projects[0]), ada.member_id
        db.session.commit()
    with counting_queries() as many:
        home = ada.get("/welcome")
    assert "Errand 14" in home.text
    assert len(many) == len(few)


# --- weekly reviews shown to mentor accounts -------------------------------------------------------

WEEK = date(2026, 11, 29)


@pytest.fixture
def published_review(app):
    """A review of WEEK with a published version citing #5 and a spend section, and a newer draft."""
    with app.app_context():
        review, _ = weekly_review.draft(WEEK, "owner")
        published = weekly_review.save_version(
            review, "# Week\n\nThe curriculum result landed (#5).\n\n## Spend\n\n$412 on GPUs.\n", OWNER)
        weekly_review.publish(review, published.version, OWNER)
        weekly_review.save_version(review, "# Week\n\nAn unpublished draft line.\n", OWNER)
        db.session.commit()
        return review.week_end.isoformat()


def _shown(app) -> bool:
    with app.app_context():
        return db.session.scalar(sa.select(WeeklyReview.shown_to_mentors).where(WeeklyReview.week_end == WEEK))


def _toggle(client, key: str, shown: str):
    page = client.get(f"/reviews/{key}")
    return client.post(f"/reviews/{key}/mentors", data={"shown": shown, "csrf_token": csrf_from(page.text)})


def test_a_mentor_reads_a_review_only_once_the_owner_shows_it(app, client, two_projects, member_client,
                                                             published_review):
    key = published_review
    mia = member_client("mia@example.org", "mentor", projects=(0,))
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    page = client.get(f"/reviews/{key}")
    assert "Show to mentor accounts" in page.text and "data-confirm=\"Show the published version" in page.text
    assert "No weekly update was shown to you yet" in mia.get("/welcome").text
    assert mia.get(f"/m/reviews/{key}").status_code == 404

    assert _toggle(client, key, "1").status_code == 303 and _shown(app)
    home = mia.get("/welcome").text
    assert f'href="/m/reviews/{key}"' in home and "version 2" in home
    update = mia.get(f"/m/reviews/{key}")
    assert update.status_code == 200
    assert "The curriculum result landed (#5)" in update.text  # #N plain, no link
    assert 'href="/experiments/5"' not in update.text and "/m/alpha/experiments/5" not in update.text
    assert "$412" not in update.text and "Spend" not in update.text
    assert "unpublished draft line" not in update.text
    # By its id as well as its week; a week never drafted or a made-up key: 404.
    with app.app_context():
        review_id = db.session.scalar(sa.select(WeeklyReview.id).where(WeeklyReview.week_end == WEEK))
    assert mia.get(f"/m/reviews/{review_id}").status_code == 200
    for other in ("2026-11-22", "nonsense", str(uuid.uuid4())):
        assert mia.get(f"/m/reviews/{other}").status_code == 404

    # Collaborators never read reviews: the route is not theirs.
    assert ada.get(f"/m/reviews/{key}").status_code == 403
    assert 'id="reviews"' not in ada.get("/welcome").text

    assert _toggle(client, key, "0").status_code == 303 and not _shown(app)
    assert mia.get(f"/m/reviews/{key}").status_code == 404
    assert f"/m/reviews/{key}" not in mia.get("/welcome").text


def test_a_shown_review_without_a_published_version_is_a_404(app, client, two_projects, member_client):
    mia = member_client("mia@example.org", "mentor", projects=(0,))
    with app.app_context():
        review, _ = weekly_review.draft(WEEK, "owner")  # a draft only
        db.session.commit()
    assert _toggle(client, WEEK.isoformat(), "1").status_code == 303 and _shown(app)
    assert mia.get(f"/m/reviews/{WEEK.isoformat()}").status_code == 404
    assert f"/m/reviews/{WEEK.isoformat()}" not in mia.get("/welcome").text


@pytest.mark.parametrize("data", [{"shown": "yes"}, {"shown": ""}, {}])
def test_a_bad_toggle_is_refused_and_changes_nothing(app, client, owner, published_review, data):
    page = client.get(f"/reviews/{published_review}")
    answer = client.post(f"/reviews/{published_review}/mentors", data={**data, "csrf_token": csrf_from(page.text)})
    assert answer.status_code == 400 and "Say whether to show this review" in answer.text
    assert not _shown(app)
    assert client.post(f"/reviews/{published_review}/mentors", data={"shown": "1"}).status_code == 400
    assert not _shown(app)
