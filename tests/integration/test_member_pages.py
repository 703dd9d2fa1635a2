"""A member's read-only pages of their projects (SPEC §13): the project (question, summary,
narrative; experiments, beliefs and papers as the role allows) and an experiment (question,
status, promoted result; never runs, costs or agent logs). Anything of another project — by
slug, by number under their own project's path, an experiment with no project, a number
that does not exist — answers the same 404."""
from __future__ import annotations

import re
import uuid

import sqlalchemy as sa

from models import AgentRun, Belief, Experiment, LiteratureItem, Project, db
from services.core.actors import Actor
from services.results import results
from tests.conftest import csrf_from

OWNER = Actor("owner", None, "Owner")


def _seed(app, make_experiment, project_ids) -> dict:
    """An experiment in each project (one with a promoted result and an agent run with a cost),
    one with no project, a belief and a paper in project A."""
    alpha, beta = (uuid.UUID(p) for p in project_ids)
    numbers = {"alpha": make_experiment("Alpha curriculum run", status="awaiting_promotion"),
               "beta": make_experiment("Beta secret sweep", status="proposed"),
               "loose": make_experiment("Unfiled scratch", status="proposed")}
    with app.app_context():
        for key, project_id in (("alpha", alpha), ("beta", beta)):
            db.session.execute(sa.update(Experiment).where(Experiment.number == numbers[key])
                               .values(project_id=project_id))
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers["alpha"]))
        experiment.hypothesis = "Easy-to-hard ordering lowers the final loss."
        results.save_clean_result(experiment, "<p>The curriculum changed the loss by 0.4%.</p>", OWNER,
                                  title="Curriculum ordering barely matters (LOW confidence)")
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        db.session.add(AgentRun(id=uuid.uuid4(), kind="apply", agent="code-writer-secret-log", request="r",
                                status="completed", scope_id=experiment.id, cost_usd=12.34))
        db.session.add(Belief(number=1, title="Ordering is a second-order effect", project_id=alpha,
                              current_belief="Within noise at 125M.", status="supported", confidence="LOW"))
        db.session.add(LiteratureItem(title="Curriculum learning revisited", project_id=alpha, authors=["Bengio"],
                                      match_key="curriculum-learning-revisited",
                                      year=2009))
        db.session.commit()
    return numbers


def _without_csrf(html: str) -> str:
    # Both places a page carries it (htmx's header and the sign-out form): its signature holds
    # the second it was made, so two pages a second apart differ there and only there.
    html = re.sub(r'name="csrf_token" value="[^"]+"', "", html)
    return re.sub(r'"X-CSRFToken": "[^"]+"', "", html)


def test_a_collaborator_reads_their_project_and_its_experiment(app, make_experiment, two_projects, member_client):
    numbers = _seed(app, make_experiment, two_projects)
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    home = ada.get("/welcome")
    assert 'href="/m/alpha"' in home.text and "/m/beta" not in home.text
    page = ada.get("/m/alpha")
    assert page.status_code == 200
    # The experiment is listed by its title, which its clean result's title replaced.
    for shown in ("Alpha project", "Curriculum ordering barely matters", "Ordering is a second-order effect",
                  "Curriculum learning revisited"):
        assert shown in page.text, shown
    for hidden in ("Beta secret sweep", "Unfiled scratch", "<form method=\"post\" action=\"/projects"):
        assert hidden not in page.text, hidden
    experiment = ada.get(f"/m/alpha/experiments/{numbers['alpha']}")
    assert experiment.status_code == 200
    assert experiment.text.count("<textarea") == 1 and "<title>#" in experiment.text
    assert "Asked: Alpha curriculum run" in experiment.text
    assert "Easy-to-hard ordering" in experiment.text and "changed the loss by 0.4%" in experiment.text
    for hidden in ("code-writer-secret-log", "12.34", "Runs", "Move to"):
        assert hidden not in experiment.text, hidden


def test_another_projects_records_answer_as_if_they_did_not_exist(app, make_experiment, two_projects,
                                                                   member_client):
    numbers = _seed(app, make_experiment, two_projects)
    bea = member_client("bea@example.org", "collaborator", projects=(1,))
    missing = bea.get("/m/no-such-project")
    assert missing.status_code == 404
    for path in ("/m/alpha", f"/m/alpha/experiments/{numbers['alpha']}",
                 f"/m/beta/experiments/{numbers['alpha']}",   # A's number under B's own path
                 f"/m/beta/experiments/{numbers['loose']}",   # an experiment of no project
                 "/m/beta/experiments/999999", "/m/beta/experiments/99999999999999999999"):
        answer = bea.get(path)
        assert answer.status_code == 404, path
        # Not a word more than for what does not exist (the CSRF token is signed with the time).
        assert _without_csrf(answer.text) == _without_csrf(missing.text), path
    assert bea.get(f"/m/beta/experiments/{numbers['beta']}").status_code == 200
    # The owner's own routes for the same records are not the member's: one 403 for all.
    for path in (f"/experiments/{numbers['alpha']}", f"/experiments/{numbers['beta']}", "/experiments/999999",
                 f"/api/experiments/{numbers['alpha']}", "/p/alpha"):  # the owner's project page
        assert bea.get(path).status_code == 403, path


def test_a_mentor_reads_the_shared_results_and_comments_on_them(app, client, make_experiment, two_projects,
                                                                member_client):
    """A mentor's project page lists its results promoted to `shared`; the result page shows
    the result as promoted and takes a comment under the mentor's name. A result of another
    project, one not shared, and a draft edited after promotion stay out of reach."""
    from models import Comment
    numbers = _seed(app, make_experiment, two_projects)
    with app.app_context():  # an edit after promotion is the owner's draft, not what was shared
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers["alpha"]))
        results.save_clean_result(experiment, "<p>DRAFT not yet shared.</p>", OWNER, title="Draft title (LOW confidence)")
        db.session.commit()
    mentor = member_client("max@example.org", "mentor", projects=(0,))
    page = mentor.get("/m/alpha")
    assert "Curriculum ordering barely matters" in page.text and "LOW" in page.text
    shown = mentor.get(f"/m/alpha/results/{numbers['alpha']}")
    assert shown.status_code == 200 and "changed the loss by 0.4%" in shown.text
    assert "DRAFT not yet shared" not in shown.text and "code-writer-secret-log" not in shown.text
    from tests.conftest import csrf_from
    posted = mentor.post(f"/m/alpha/results/{numbers['alpha']}/comments",
                         data={"body": "Nice and careful.", "csrf_token": csrf_from(shown.text)})
    assert posted.status_code == 303
    with app.app_context():
        comment = db.session.scalar(sa.select(Comment))
        assert (comment.author_kind, comment.author_name) == ("member", "max")
    other = member_client("ned@example.org", "mentor", projects=(1,))
    for path in (f"/m/alpha/results/{numbers['alpha']}", f"/m/beta/results/{numbers['alpha']}",
                 f"/m/beta/results/{numbers['beta']}", "/m/beta/results/999999"):
        assert other.get(path).status_code == 404, path
    assert client.get(f"/m/alpha/results/{numbers['alpha']}").headers["Location"] == f"/experiments/{numbers['alpha']}"


def test_a_mentor_reads_the_project_but_not_its_experiments_beliefs_or_papers(app, make_experiment, two_projects,
                                                                              member_client):
    numbers = _seed(app, make_experiment, two_projects)
    cy = member_client("cy@example.org", "mentor", projects=(0,))
    page = cy.get("/m/alpha")
    assert page.status_code == 200 and "Alpha project" in page.text
    for hidden in ('id="experiments"', f"/m/alpha/experiments/{numbers['alpha']}", "Ordering is a second-order effect", "Curriculum learning revisited"):
        assert hidden not in page.text, hidden
    for number in (numbers["alpha"], 999999):
        assert cy.get(f"/m/alpha/experiments/{number}").status_code == 403  # the same for every number


def test_a_member_removed_from_a_project_loses_it_at_their_next_request(app, client, make_experiment,
                                                                        two_projects, member_client):
    from tests.conftest import csrf_from
    numbers = _seed(app, make_experiment, two_projects)
    dee = member_client("dee@example.org", "collaborator", projects=(0,))
    assert dee.get(f"/m/alpha/experiments/{numbers['alpha']}").status_code == 200
    page = client.get("/settings/members")
    client.post(f"/settings/members/{dee.member_id}", data={"role": "collaborator", "projects": [two_projects[1]],
                                                            "csrf_token": csrf_from(page.text)})
    assert dee.get(f"/m/alpha/experiments/{numbers['alpha']}").status_code == 404
    assert dee.get("/m/alpha").status_code == 404


def test_the_owner_is_sent_to_the_full_pages(app, client, make_experiment, two_projects):
    numbers = _seed(app, make_experiment, two_projects)
    assert client.get("/m/alpha").headers["Location"] == "/p/alpha"
    assert client.get(f"/m/alpha/experiments/{numbers['alpha']}").headers["Location"] == \
        f"/experiments/{numbers['alpha']}"


def test_the_project_page_reads_in_a_constant_number_of_queries(app, make_experiment, two_projects, member_client):
    """More experiments, beliefs and papers, the same statements."""
    from tests.integration.queries import counting_queries
    _seed(app, make_experiment, two_projects)
    eve = member_client("eve@example.org", "collaborator", projects=(0,))
    eve.get("/m/alpha")
    with counting_queries() as few:
        eve.get("/m/alpha")
    with app.app_context():
        alpha = db.session.scalar(sa.select(Project.id).where(Project.slug == "alpha"))
        for i in range(20):
            db.session.add(Belief(number=100 + i, title=f"Belief {i}", project_id=alpha, status="active",
                                  confidence="LOW"))
            db.session.add(LiteratureItem(title=f"Paper {i}", project_id=alpha, match_key=f"paper-{i}"))
        db.session.commit()
    for i in range(20):
        number = make_experiment(f"More {i}", status="proposed")
        with app.app_context():
            db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(project_id=alpha))
            db.session.commit()
    with counting_queries() as many:
        page = eve.get("/m/alpha")
    assert "More 19" in page.text and "Paper 19" in page.text
    assert len(many) == len(few)


# --- comments by members ---------------------------------------------------------------------------

def _comment(member, path: str, body: str):
    page = member.get(path)
    from tests.conftest import csrf_from
    return member.post(f"{path}/comments", data={"body": body, "csrf_token": csrf_from(page.text)})


def test_a_collaborators_comment_carries_their_name_everywhere(app, client, make_experiment, two_projects,
                                                               member_client):
    """The comment is stored as the member's, shows their name on their page and on the
    owner's experiment page, and the timeline's event names the member as its actor."""
    from models import Comment, WorkflowEvent
    numbers = _seed(app, make_experiment, two_projects)
    fay = member_client("fay@example.org", "collaborator", projects=(0,))
    path = f"/m/alpha/experiments/{numbers['alpha']}"
    posted = _comment(fay, path, "Is the 0.4% inside the seed spread?")
    assert posted.status_code == 303
    assert "Is the 0.4% inside the seed spread?" in fay.get(path).text
    owner_page = client.get(f"/experiments/{numbers['alpha']}")
    assert "Is the 0.4% inside the seed spread?" in owner_page.text and ">fay</strong>" in owner_page.text
    assert '<span class="actor">by fay' in owner_page.text  # the timeline names the member
    with app.app_context():
        comment = db.session.scalar(sa.select(Comment))
        assert (comment.author_kind, comment.author_name) == ("member", "fay")
        event = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.event_type == "comment"))
        assert (event.actor_kind, event.actor_id) == ("member", str(fay.member_id))


def test_a_members_at_claude_starts_no_run(app, make_experiment, two_projects, member_client, monkeypatch):
    """Members never spend: an @claude in their comment is a comment, and no agent run is made."""
    from services.workflow import orchestration
    monkeypatch.setattr(orchestration, "agents_enabled", lambda: True)
    numbers = _seed(app, make_experiment, two_projects)
    gil = member_client("gil@example.org", "collaborator", projects=(0,))
    with app.app_context():
        runs_before = db.session.scalar(sa.select(sa.func.count()).select_from(AgentRun))
    assert _comment(gil, f"/m/alpha/experiments/{numbers['alpha']}", "@claude rerun this at 350M").status_code == 303
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(AgentRun)) == runs_before


def test_a_comment_out_of_reach_or_empty_stores_nothing(app, make_experiment, two_projects, member_client):
    """Another project's experiment (under either path) answers 404, as does any experiment to
    a mentor (who may comment, but reads no experiment page), an empty
    body 400 with its sentence, a post without CSRF 400: no comment in any case."""
    from models import Comment
    from tests.conftest import csrf_from
    numbers = _seed(app, make_experiment, two_projects)
    hal = member_client("hal@example.org", "collaborator", projects=(1,))
    mentor = member_client("ivy@example.org", "mentor", projects=(0,))
    csrf = csrf_from(hal.get("/welcome").text)
    for path in (f"/m/alpha/experiments/{numbers['alpha']}", f"/m/beta/experiments/{numbers['alpha']}",
                 "/m/beta/experiments/999999"):
        assert hal.post(f"{path}/comments", data={"body": "hello", "csrf_token": csrf}).status_code == 404, path
    mentor_csrf = csrf_from(mentor.get("/welcome").text)
    assert mentor.post(f"/m/alpha/experiments/{numbers['alpha']}/comments",
                       data={"body": "hello", "csrf_token": mentor_csrf}).status_code == 404
    own = f"/m/beta/experiments/{numbers['beta']}"
    empty = _comment(hal, own, "   ")
    assert empty.status_code == 400 and "error" in empty.text
    assert hal.post(f"{own}/comments", data={"body": "no csrf"}).status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Comment)) == 0


# --- proposals by collaborators ---------------------------------------------------------------------

def _propose(member, slug: str, **form):
    from tests.conftest import csrf_from
    page = member.get(f"/m/{slug}")
    return member.post(f"/m/{slug}/experiments", data={**form, "csrf_token": csrf_from(page.text)})


def test_a_collaborators_proposal_reaches_the_owner_as_theirs(app, client, two_projects, member_client):
    """The proposal is an experiment of their project in `proposed` (the board's ideas),
    marked as theirs: the owner's page says who proposed it, and the member lists it."""
    jan = member_client("jan@example.org", "collaborator", projects=(0,))
    answer = _propose(jan, "alpha", title="Add a 350M control run", hypothesis="The gap closes at 350M.")
    assert answer.status_code == 303
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment))
        assert experiment.status == "proposed" and str(experiment.project_id) == two_projects[0]
        assert experiment.proposed_by_member_id == jan.member_id and not experiment.proposed_by_agent
        assert experiment.cost_cap_usd is None and experiment.auto_approve_plan is False
        number = experiment.number
    owner_page = client.get(f"/experiments/{number}")
    assert "proposed by jan" in owner_page.text and "The gap closes at 350M." in owner_page.text
    today = client.get("/").text  # the owner's Today queue, as theirs, with its action in place
    assert f'id="need-proposed-{number}"' in today and "jan proposed this experiment" in today
    started = client.post(f"/today/proposed/{number}", data={"action": "start", "csrf_token": csrf_from(today)})
    assert started.status_code in (200, 303)
    with app.app_context():
        assert db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number)) == "planning"
    assert "Add a 350M control run" in jan.get("/m/alpha").text


def test_a_bad_or_out_of_reach_proposal_makes_nothing(app, two_projects, member_client):
    """No title, a title too long, another project, a mentor: nothing is made, each with its answer."""
    kai = member_client("kai@example.org", "collaborator", projects=(0,))
    mentor = member_client("lou@example.org", "mentor", projects=(0,))
    empty = _propose(kai, "alpha", title="   ")
    assert empty.status_code == 400 and "Title is required" in empty.text
    long = _propose(kai, "alpha", title="x" * 301)
    assert long.status_code == 400 and "limit is 300" in long.text and 'value="xxx' in long.text
    from tests.conftest import csrf_from
    csrf = csrf_from(kai.get("/welcome").text)
    assert kai.post("/m/beta/experiments", data={"title": "Sneak in", "csrf_token": csrf}).status_code == 404
    mentor_csrf = csrf_from(mentor.get("/welcome").text)
    assert mentor.post("/m/alpha/experiments", data={"title": "Mine", "csrf_token": mentor_csrf}).status_code == 403
    assert kai.post("/m/alpha/experiments", data={"title": "No CSRF"}).status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Experiment)) == 0


def test_a_collaborators_todo_lands_in_the_owners_inbox_as_theirs(app, client, two_projects, member_client):
    from models import Todo
    from tests.conftest import csrf_from
    ola = member_client("ola@example.org", "collaborator", projects=(0,))
    page = ola.get("/m/alpha")
    done = ola.post("/m/alpha/todos", data={"title": "Check the tokenizer version", "body_md": "It changed in May.",
                                            "csrf_token": csrf_from(page.text)})
    assert done.status_code == 303 and "Sent to the owner" in ola.get(done.headers["Location"]).text
    with app.app_context():
        todo = db.session.scalar(sa.select(Todo))
        assert (todo.status, str(todo.project_id), todo.proposed_by_member_id) == ("inbox", two_projects[0],
                                                                                   ola.member_id)
        number = todo.number
    assert "proposed by ola" in client.get(f"/todos/{number}").text
    assert "Check the tokenizer version" in client.get("/todos").text
    today = client.get("/").text  # waiting on the owner's Today as theirs, until scoped or closed
    assert f'id="need-suggested_todo-{number}"' in today and "ola suggested this todo" in today


def test_a_bad_or_out_of_reach_todo_makes_nothing(app, two_projects, member_client):
    from models import Todo
    from tests.conftest import csrf_from
    pia = member_client("pia@example.org", "collaborator", projects=(0,))
    mentor = member_client("quo@example.org", "mentor", projects=(0,))
    empty = pia.post("/m/alpha/todos", data={"title": " ", "csrf_token": csrf_from(pia.get("/m/alpha").text)})
    assert empty.status_code == 400 and 'role="alert"' in empty.text
    csrf = csrf_from(pia.get("/welcome").text)
    assert pia.post("/m/beta/todos", data={"title": "Sneak", "csrf_token": csrf}).status_code == 404
    assert mentor.post("/m/alpha/todos", data={"title": "Mine", "csrf_token": csrf_from(mentor.get("/welcome").text)}
                       ).status_code == 403
    assert pia.post("/m/alpha/todos", data={"title": "No CSRF"}).status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Todo)) == 0


# --- papers added by collaborators ---------------------------------------------------------------------

def _add_paper(member, slug: str, **form):
    from tests.conftest import csrf_from
    return member.post(f"/m/{slug}/literature", data={**form, "csrf_token": csrf_from(member.get(f"/m/{slug}").text)})


def test_a_collaborators_paper_joins_their_projects_library_as_theirs(app, client, two_projects, member_client):
    rae = member_client("rae@example.org", "collaborator", projects=(0,))
    before = re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)
    added = _add_paper(rae, "alpha", title="Sleeper Agents", authors="Hubinger; Denison", year="2024",
                       url="https://example.org/sleeper")
    assert added.status_code == 303 and "Added to the library as yours" in rae.get(added.headers["Location"]).text
    with app.app_context():
        item = db.session.scalar(sa.select(LiteratureItem))
        assert (item.title, item.authors, item.year, str(item.project_id), item.proposed_by_member_id) == (
            "Sleeper Agents", ["Hubinger", "Denison"], 2024, two_projects[0], rae.member_id)
        item_id = item.id
    assert "suggested by rae" in client.get(f"/library/{item_id}").text
    today = client.get("/").text
    assert f'id="need-suggested_paper-{item_id}"' in today and "rae added this paper" in today
    # Today's poll saw it: the member's row was stamped (the library itself is not watched).
    assert client.get("/today/live", headers={"If-None-Match": f'"{before}"'}).status_code == 200
    again = _add_paper(rae, "alpha", title="sleeper agents", authors="Hubinger")
    assert "already in this project" in rae.get(again.headers["Location"]).text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(LiteratureItem)) == 1


def test_a_paper_in_another_projects_library_is_neither_revealed_nor_changed(app, two_projects, member_client):
    """The same work in project B's library: a collaborator of A adding it gets their own row
    (and the same answer as for a new paper); B's row is untouched."""
    with app.app_context():
        db.session.add(LiteratureItem(title="Sleeper Agents", authors=["Hubinger"], project_id=uuid.UUID(two_projects[1]),
                                      match_key="sleeper agents|hubinger", notes="B's private notes"))
        db.session.commit()
        from services.research.literature_sources import match_key
        db.session.execute(sa.update(LiteratureItem).values(match_key=match_key("Sleeper Agents", ["Hubinger"])))
        db.session.commit()
    sam = member_client("sam@example.org", "collaborator", projects=(0,))
    added = _add_paper(sam, "alpha", title="Sleeper Agents", authors="Hubinger", year="2024")
    assert "Added to the library as yours" in sam.get(added.headers["Location"]).text
    with app.app_context():
        rows = {str(i.project_id): i for i in db.session.scalars(sa.select(LiteratureItem))}
        assert set(rows) == set(two_projects)
        assert rows[two_projects[1]].year is None and rows[two_projects[1]].notes == "B's private notes"
        assert rows[two_projects[1]].proposed_by_member_id is None


def test_a_bad_or_out_of_reach_paper_adds_nothing(app, two_projects, member_client):
    from tests.conftest import csrf_from
    tom = member_client("tom@example.org", "collaborator", projects=(0,))
    mentor = member_client("uma@example.org", "mentor", projects=(0,))
    for form, message in (({"title": ""}, "Give the title"), ({"title": "T", "year": "soon"}, "year"),
                          ({"title": "x" * 1001}, "the most is 1,000")):
        refused = _add_paper(tom, "alpha", **form)
        assert refused.status_code == 400 and message.lower() in refused.text.lower(), form
    csrf = csrf_from(tom.get("/welcome").text)
    assert tom.post("/m/beta/literature", data={"title": "Sneak", "csrf_token": csrf}).status_code == 404
    assert mentor.post("/m/alpha/literature", data={"title": "M", "csrf_token": csrf_from(mentor.get("/welcome").text)}
                       ).status_code == 403
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(LiteratureItem)) == 0


# --- a member's Today ----------------------------------------------------------------------------------

def test_a_members_today_shows_their_projects_discussion_and_proposals(app, client, make_experiment, two_projects,
                                                                       member_client):
    """The newest comments of their projects' experiments (never another project's), and what
    became of what they proposed — in the same number of statements however much there is."""
    from services.planning import discussion
    from tests.integration.queries import counting_queries
    numbers = _seed(app, make_experiment, two_projects)
    vic = member_client("vic@example.org", "collaborator", projects=(0,))
    _propose(vic, "alpha", title="Add a 350M control run")
    with app.app_context():
        for key, text in (("alpha", "Owner note on alpha"), ("beta", "Owner secret on beta")):
            experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers[key]))
            discussion.post_comment("experiment", experiment, text, OWNER)
        db.session.commit()
    with counting_queries() as few:
        home = vic.get("/welcome")
    assert "Owner note on alpha" in home.text and "Owner secret on beta" not in home.text
    assert "Add a 350M control run" in home.text and "proposed" in home.text
    with app.app_context():
        alpha = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers["alpha"]))
        for i in range(15):
            discussion.post_comment("experiment", alpha, f"More {i}", OWNER)
        db.session.commit()
    for i in range(5):
        _propose(vic, "alpha", title=f"Idea {i}")
    with counting_queries() as many:
        home = vic.get("/welcome")
    assert "More 14" in home.text and "Idea 4" in home.text
    assert len(many) == len(few)
    mentor = member_client("wes@example.org", "mentor", projects=(0,))
    assert "Owner note on alpha" not in mentor.get("/welcome").text  # mentors read no experiment discussion
