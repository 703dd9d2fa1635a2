"""Members through the API (SPEC §13): their own tokens, the member routes under
/api/m/ scoped to their projects, and typed links they propose. Another project's record
answers as one that does not exist, by number, uuid and list filter alike."""
from __future__ import annotations

import re
import uuid

import sqlalchemy as sa

from models import ApiToken, User, db
from tests.conftest import csrf_from


def _mint(member, name="notebook", scopes=("read",)):
    page = member.get("/welcome/tokens")
    return member.post("/welcome/tokens", data={"name": name, "scopes": list(scopes),
                                                "csrf_token": csrf_from(page.text)})


def _secret(html: str) -> str:
    return re.search(r'value="(sk_[^"]+)"', html).group(1)


def test_a_member_mints_sees_once_and_revokes_their_own_token(app, client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    empty = ada.get("/welcome/tokens")
    assert empty.status_code == 200 and "You hold no tokens" in empty.text
    assert empty.headers["Cache-Control"] == "no-store"
    # The role's scopes are offered, and only those.
    assert 'value="read"' in empty.text and 'value="write"' in empty.text
    assert 'value="dispatch"' not in empty.text and 'value="promote"' not in empty.text
    minted = _mint(ada, scopes=("read", "write"))
    assert minted.status_code == 303
    shown = ada.get("/welcome/tokens")
    secret = _secret(shown.text)
    assert "Copy your new token now" in shown.text
    assert secret not in ada.get("/welcome/tokens").text  # once
    with app.app_context():
        token = db.session.scalar(sa.select(ApiToken).where(ApiToken.user_id == ada.member_id))
        assert token.scopes == ["read", "write"]
        token_id = token.id
    assert app.test_client().get("/api/m/projects", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    # The owner's Members page counts it.
    assert "1 API token" in client.get("/settings/members").text
    page = ada.get("/welcome/tokens")
    revoked = ada.post(f"/welcome/tokens/{token_id}/revoke", data={"csrf_token": csrf_from(page.text)})
    assert revoked.status_code == 303
    assert app.test_client().get("/api/m/projects", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    assert "0 API tokens" in client.get("/settings/members").text


def test_a_token_beyond_the_role_or_without_a_name_is_refused_and_nothing_is_made(app, two_projects,
                                                                                   member_client):
    mentor = member_client("mo@example.org", "mentor")
    for scopes, name, said in ((("read", "write"), "x", "cannot hold the &#39;write&#39; scope"),
                               (("dispatch",), "x", "cannot hold the &#39;dispatch&#39; scope"),
                               (("bogus",), "x", "Unknown scope"),
                               ((), "x", "Choose at least one scope"),
                               (("read",), "   ", "Give the token a name")):
        answer = _mint(mentor, name=name, scopes=scopes)
        assert answer.status_code == 303, scopes
        assert said in mentor.get("/welcome/tokens").text, scopes
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(ApiToken)
                                 .where(ApiToken.user_id == mentor.member_id)) == 0


def test_a_member_cannot_revoke_anothers_token(app, client, api_client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    bob = member_client("bob@example.org", "collaborator")
    _mint(bob)
    owners = api_client("read")
    with app.app_context():
        bobs = db.session.scalar(sa.select(ApiToken.id).where(ApiToken.user_id == bob.member_id))
    page = ada.get("/welcome/tokens")
    for token_id in (bobs, owners.token_id, uuid.uuid4()):
        answer = ada.post(f"/welcome/tokens/{token_id}/revoke", data={"csrf_token": csrf_from(page.text)})
        assert answer.status_code == 404, token_id
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(ApiToken)
                                 .where(ApiToken.revoked_at.is_not(None))) == 0
    # The owner's session is sent to the owner's own tokens page.
    assert client.get("/welcome/tokens").headers["Location"].endswith("/api-tokens")


def test_removing_a_member_ends_the_token_they_minted(app, client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    _mint(ada)
    secret = _secret(ada.get("/welcome/tokens").text)
    page = client.get("/settings/members")
    client.post(f"/settings/members/{ada.member_id}/remove", data={"csrf_token": csrf_from(page.text)})
    assert app.test_client().get("/api/m/projects", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    with app.app_context():
        assert db.session.get(User, ada.member_id).removed_at is not None


# --- the /api/m/ routes --------------------------------------------------------------------------

def _token_client(app, member, scopes=("read", "write")):
    """A client holding a token the member minted on their own page."""
    _mint(member, scopes=scopes)
    scripted = app.test_client()
    scripted.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {_secret(member.get('/welcome/tokens').text)}"
    return scripted


def _uuid_of(app, number):
    from models import Experiment
    with app.app_context():
        return str(db.session.scalar(sa.select(Experiment.id).where(Experiment.number == number)))


def _counts(app) -> dict:
    from models import Comment, Experiment, LiteratureItem, RecordLink, Todo
    with app.app_context():
        return {m.__name__: db.session.scalar(sa.select(sa.func.count()).select_from(m))
                for m in (Comment, Experiment, LiteratureItem, RecordLink, Todo)}


def test_a_collaborators_token_reads_only_their_projects_records(app, make_experiment, two_projects, member_client):
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    ada = _token_client(app, member_client("ada@example.org", "collaborator", projects=(0,)), scopes=("read",))
    listed = ada.get("/api/m/experiments").get_json()["experiments"]
    assert [e["number"] for e in listed] == [numbers["alpha"]]
    assert set(listed[0]) == {"id", "number", "title", "status", "hypothesis", "project", "proposedByMember",
                              "createdAt", "updatedAt"}
    assert ada.get(f"/api/m/experiments?project=alpha&status={listed[0]['status']}").get_json()["experiments"]
    other = "proposed" if listed[0]["status"] != "proposed" else "planning"
    assert ada.get(f"/api/m/experiments?project=alpha&status={other}").get_json()["experiments"] == []
    assert ada.get("/api/m/experiments?status=nonsense").status_code == 400
    detail = ada.get(f"/api/m/experiments/{numbers['alpha']}")
    assert detail.status_code == 200
    assert detail.get_json()["experiment"]["promotedResult"]["title"].startswith("Curriculum ordering")
    assert ada.get(f"/api/m/experiments/{_uuid_of(app, numbers['alpha'])}").status_code == 200
    for hidden in ("code-writer-secret-log", "12.34", "costUsd", "runs", "plan", "pod"):
        assert hidden not in detail.text, hidden
    # Another project's experiment, one of no project and none at all: one 404, one sentence shape.
    for ref in (numbers["beta"], _uuid_of(app, numbers["beta"]), numbers["loose"], 999999, uuid.uuid4(), "x"):
        answer = ada.get(f"/api/m/experiments/{ref}")
        assert answer.status_code == 404, ref
        assert answer.get_json()["message"] == f"No experiment {ref}.", ref
    for path in ("/api/m/experiments?project=beta", "/api/m/beliefs?project=beta", "/api/m/literature?project=beta",
                 "/api/m/results?project=beta", "/api/m/experiments?project=nowhere"):
        answer = ada.get(path)
        assert answer.status_code == 404, path
        assert answer.get_json()["message"].startswith("No project"), path
    assert [p["slug"] for p in ada.get("/api/m/projects").get_json()["projects"]] == ["alpha"]
    assert [b["title"] for b in ada.get("/api/m/beliefs").get_json()["beliefs"]] == \
        ["Ordering is a second-order effect"]
    assert [i["title"] for i in ada.get("/api/m/literature").get_json()["literature"]] == \
        ["Curriculum learning revisited"]
    assert [r["number"] for r in ada.get("/api/m/results").get_json()["results"]] == [numbers["alpha"]]
    # A member of project B sees none of A's.
    bob = _token_client(app, member_client("bob@example.org", "collaborator", projects=(1,)), scopes=("read",))
    assert [e["number"] for e in bob.get("/api/m/experiments").get_json()["experiments"]] == [numbers["beta"]]
    assert bob.get("/api/m/beliefs").get_json()["beliefs"] == []
    assert bob.get("/api/m/results").get_json()["results"] == []
    assert bob.get(f"/api/m/experiments/{numbers['alpha']}").status_code == 404


def test_the_owners_api_stays_the_owners(app, make_experiment, two_projects, member_client):
    """A member's token with every scope their role allows opens none of the owner's API."""
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    ada = _token_client(app, member_client("ada@example.org", "collaborator", projects=(0,)))
    for path in ("/api/experiments", f"/api/experiments/{numbers['alpha']}", "/api/runs", "/api/beliefs",
                 "/api/literature", "/api/projects"):
        answer = ada.get(path)
        assert answer.status_code == 403 and answer.get_json()["error"] == "not_for_your_role", path


def test_a_collaborator_comments_and_proposes_through_the_api_as_themselves(app, client, make_experiment,
                                                                             two_projects, member_client):
    from models import Comment, Experiment, LiteratureItem, Todo
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    member = member_client("ada@example.org", "collaborator", projects=(0,))
    ada = _token_client(app, member)
    said = ada.post(f"/api/m/experiments/{numbers['alpha']}/comments", json={"body": "Try a **larger** model?"})
    assert said.status_code == 201, said.text
    assert said.get_json()["comment"]["authorName"] == "ada"
    proposed = ada.post("/api/m/projects/alpha/experiments", json={"title": "Reverse curriculum",
                                                                   "hypothesis": "Hard first helps."})
    assert proposed.status_code == 201, proposed.text
    assert proposed.get_json()["experiment"]["status"] == "proposed"
    todo = ada.post("/api/m/projects/alpha/todos", json={"title": "Rerun seed 3", "bodyMd": "It diverged."})
    assert todo.status_code == 201, todo.text
    paper = ada.post("/api/m/projects/alpha/literature", json={"title": "Self-paced learning", "authors": "Kumar",
                                                               "year": 2010, "url": "https://example.org/spl"})
    assert paper.status_code == 201, paper.text
    with app.app_context():
        comment = db.session.scalar(sa.select(Comment).where(Comment.body_md == "Try a **larger** model?"))
        assert comment.author_kind == "member"
        made = db.session.scalar(sa.select(Experiment).where(Experiment.title == "Reverse curriculum"))
        assert made.proposed_by_member_id == member.member_id
        assert db.session.scalar(sa.select(Todo).where(Todo.title == "Rerun seed 3")).proposed_by_member_id \
            == member.member_id
        assert db.session.scalar(sa.select(LiteratureItem).where(LiteratureItem.title == "Self-paced learning")) \
            .proposed_by_member_id == member.member_id


def test_bad_or_out_of_reach_writes_through_the_api_change_nothing(app, client, make_experiment, two_projects,
                                                                   member_client):
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    member = member_client("ada@example.org", "collaborator", projects=(0,))
    ada = _token_client(app, member)
    reader = _token_client(app, member, scopes=("read",))
    before = _counts(app)
    attempts = [
        (ada, f"/api/m/experiments/{numbers['beta']}/comments", {"body": "hi"}, 404),
        (ada, f"/api/m/experiments/{numbers['loose']}/comments", {"body": "hi"}, 404),
        (ada, f"/api/m/experiments/{numbers['alpha']}/comments", {"body": "   "}, 400),
        (ada, f"/api/m/experiments/{numbers['alpha']}/comments", {"body": "x", "author": "owner"}, 400),
        (ada, "/api/m/projects/beta/experiments", {"title": "Sneak", "hypothesis": "h"}, 404),
        (ada, "/api/m/projects/alpha/experiments", {"title": "", "hypothesis": "h"}, 400),
        (ada, "/api/m/projects/alpha/experiments", {"title": "t", "costCapUsd": 99}, 400),
        (ada, "/api/m/projects/beta/todos", {"title": "Sneak"}, 404),
        (ada, "/api/m/projects/alpha/todos", {"title": ""}, 400),
        (ada, "/api/m/projects/beta/literature", {"title": "Sneak"}, 404),
        (ada, "/api/m/projects/alpha/literature", {"title": ""}, 400),
        (reader, f"/api/m/experiments/{numbers['alpha']}/comments", {"body": "hi"}, 403),
        (reader, "/api/m/projects/alpha/experiments", {"title": "t"}, 403),
    ]
    for who, path, body, status in attempts:
        answer = who.post(path, json=body)
        assert answer.status_code == status, (path, body, answer.status_code, answer.text)
    assert ada.post("/api/m/projects/alpha/todos", data="not json",
                    content_type="application/json").status_code == 400
    assert _counts(app) == before


def test_a_mentor_reads_shared_results_through_the_api_and_nothing_else(app, make_experiment, two_projects,
                                                                        member_client):
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    mentor = member_client("mo@example.org", "mentor", projects=(0, 1))
    scripted = _token_client(app, mentor, scopes=("read",))
    assert [r["number"] for r in scripted.get("/api/m/results").get_json()["results"]] == [numbers["alpha"]]
    for path in ("/api/m/experiments", f"/api/m/experiments/{numbers['alpha']}", "/api/m/beliefs",
                 "/api/m/literature"):
        answer = scripted.get(path)
        assert answer.status_code == 403 and answer.get_json()["error"] == "not_for_your_role", path
    # With their session (and CSRF), a mentor comments on a shared result, never on another.
    csrf = csrf_from(mentor.get("/welcome").text)
    assert mentor.post(f"/api/m/experiments/{numbers['alpha']}/comments", json={"body": "Nice."},
                       headers={"X-CSRFToken": csrf}).status_code == 201
    assert mentor.post(f"/api/m/experiments/{numbers['beta']}/comments", json={"body": "Nice."},
                       headers={"X-CSRFToken": csrf}).status_code == 404
    assert mentor.post(f"/api/m/experiments/{numbers['alpha']}/comments",
                       json={"body": "No CSRF."}).status_code == 400


def test_the_owner_reads_the_member_routes_across_projects(app, client, make_experiment, two_projects):
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    listed = {e["number"] for e in client.get("/api/m/experiments").get_json()["experiments"]}
    assert {numbers["alpha"], numbers["beta"]} <= listed and numbers["loose"] not in listed


# --- typed links --------------------------------------------------------------------------------

def test_a_collaborator_links_two_records_of_their_project_as_theirs(app, client, make_experiment, two_projects,
                                                                    member_client):
    from models import RecordLink
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    ada = _token_client(app, member_client("ada@example.org", "collaborator", projects=(0,)))
    made = ada.post("/api/m/links", json={"source": f"#{numbers['alpha']}", "kind": "tests", "target": "B1",
                                          "note": "The sweep tests it."})
    assert made.status_code == 201, made.text
    assert made.get_json()["link"]["actorKind"] == "member" and made.get_json()["link"]["actorLabel"] == "ada"
    with app.app_context():
        link = db.session.scalar(sa.select(RecordLink))
        assert (link.source_kind, link.target_kind, link.actor_kind) == ("experiment", "belief", "member")
    # The owner's belief page names who linked it.
    assert "linked by ada" in client.get("/beliefs/1").text
    again = ada.post("/api/m/links", json={"source": f"#{numbers['alpha']}", "kind": "tests", "target": "B1"})
    assert again.status_code == 409


def test_a_link_out_of_reach_is_refused_and_reveals_nothing(app, make_experiment, two_projects, member_client):
    from models import AgentRun, Belief
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    with app.app_context():
        db.session.add(Belief(number=2, title="Beta's belief", project_id=uuid.UUID(two_projects[1])))
        db.session.commit()
        run_id = db.session.scalar(sa.select(AgentRun.id))
    ada = _token_client(app, member_client("ada@example.org", "collaborator", projects=(0,)))
    both = _token_client(app, member_client("both@example.org", "collaborator", projects=(0, 1)))
    before = _counts(app)
    alpha = f"#{numbers['alpha']}"
    hidden = {f"#{numbers['beta']}", f"#{numbers['loose']}", "#999999", "B2", "B99", f"run:{run_id}", "beta",
              "R999"}
    for target in hidden:
        answer = ada.post("/api/m/links", json={"source": alpha, "kind": "sibling", "target": target})
        assert answer.status_code == 404, (target, answer.text)
        assert answer.get_json()["message"].startswith(f"Nothing you can link is named '{target}'"), target
        reversed_ = ada.post("/api/m/links", json={"source": target, "kind": "sibling", "target": alpha})
        assert reversed_.status_code == 404, target
    for body, status in (({"source": alpha, "kind": "sibling", "target": ""}, 400),
                         ({"source": alpha, "kind": "nonsense", "target": "B1"}, 400),
                         ({"source": alpha, "kind": "sibling", "target": alpha}, 400),
                         ({"source": alpha, "kind": "sibling", "target": "B1", "actorKind": "owner"}, 400),
                         ({"source": alpha, "kind": "sibling", "target": "x" * 300}, 400)):
        answer = ada.post("/api/m/links", json=body)
        assert answer.status_code == status, (body, answer.text)
    across = both.post("/api/m/links", json={"source": alpha, "kind": "sibling", "target": "B2"})
    assert across.status_code == 400 and "same project" in across.get_json()["message"]
    mentor = _token_client(app, member_client("mo@example.org", "mentor", projects=(0,)), scopes=("read",))
    assert mentor.post("/api/m/links", json={"source": alpha, "kind": "sibling", "target": "B1"}).status_code == 403
    assert _counts(app) == before


def test_the_member_lists_read_in_a_constant_number_of_queries(app, make_experiment, two_projects, member_client):
    """More experiments, beliefs and papers in the member's project, the same statements."""
    from models import Belief, Experiment, LiteratureItem, Project
    from tests.integration.queries import counting_queries
    from tests.integration.test_member_pages import _seed
    _seed(app, make_experiment, two_projects)
    ada = _token_client(app, member_client("ada@example.org", "collaborator", projects=(0,)), scopes=("read",))
    paths = ("/api/m/experiments", "/api/m/beliefs", "/api/m/literature", "/api/m/results", "/api/m/projects")
    for path in paths:
        ada.get(path)
    few = {}
    for path in paths:
        with counting_queries() as statements:
            assert ada.get(path).status_code == 200
        few[path] = len(statements)
    with app.app_context():
        alpha = db.session.scalar(sa.select(Project.id).where(Project.slug == "alpha"))
        for i in range(15):
            db.session.add(Belief(number=100 + i, title=f"Belief {i}", project_id=alpha, status="active",
                                  confidence="LOW"))
            db.session.add(LiteratureItem(title=f"Paper {i}", project_id=alpha, match_key=f"paper-{i}"))
        db.session.commit()
    for i in range(15):
        number = make_experiment(f"More {i}", status="proposed")
        with app.app_context():
            db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(project_id=alpha))
            db.session.commit()
    for path in paths:
        with counting_queries() as statements:
            answer = ada.get(path)
        assert answer.status_code == 200
        assert len(statements) == few[path], (path, few[path], len(statements))
    assert len(ada.get("/api/m/experiments").get_json()["experiments"]) == 16


def test_a_collaborator_links_from_the_experiment_page_and_sees_only_links_in_reach(app, make_experiment,
                                                                                   two_projects, member_client):
    from models import AgentRun, Experiment, RecordLink
    from services.core.actors import Actor
    from services.research import links
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    with app.app_context():
        alpha = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers["alpha"]))
        beta = db.session.scalar(sa.select(Experiment).where(Experiment.number == numbers["beta"]))
        run = db.session.scalar(sa.select(AgentRun))
        owner = Actor("owner", None, "Owner")
        # The owner's links from A's experiment to a run and to B's experiment: never shown to A's member.
        links.create_link(links.describe("experiment", alpha), "derives_from", links.describe("run", run), owner)
        links.create_link(links.describe("experiment", alpha), "sibling", links.describe("experiment", beta), owner)
        db.session.commit()
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    path = f"/m/alpha/experiments/{numbers['alpha']}"
    page = ada.get(path)
    assert "No links yet" in page.text
    assert "Beta secret sweep" not in page.text and "code-writer-secret-log" not in page.text
    csrf = csrf_from(page.text)
    before = _counts(app)
    for target, status in (("B99", 404), (f"#{numbers['beta']}", 404), ("", 400)):
        refused = ada.post(f"{path}/links", data={"kind": "tests", "target": target, "csrf_token": csrf})
        assert refused.status_code == status, (target, refused.status_code)
        assert "Beta secret sweep" not in refused.text
    assert _counts(app) == before
    made = ada.post(f"{path}/links", data={"kind": "tests", "target": "B1", "csrf_token": csrf})
    assert made.status_code == 303
    page = ada.get(path)
    assert "linked by ada" in page.text and "Ordering is a second-order effect" in page.text
    assert 'href="/m/alpha#beliefs"' in page.text
    assert "Beta secret sweep" not in page.text and "code-writer-secret-log" not in page.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(RecordLink)
                                 .where(RecordLink.actor_kind == "member")) == 1
    mentor = member_client("mo@example.org", "mentor", projects=(0,))
    assert mentor.post(f"{path}/links", data={"kind": "tests", "target": "B1",
                                              "csrf_token": csrf_from(mentor.get("/welcome").text)}).status_code == 403


def test_a_token_confined_to_one_experiment_opens_no_member_route(app, api_client, owner, make_experiment):
    """A token bound to one experiment (an agent run's) reaches none of /api/m/, even the owner's."""
    from models import Experiment
    number = make_experiment("Confined")
    scripted = api_client("read,write")
    with app.app_context():
        token = db.session.get(ApiToken, scripted.token_id)
        token.experiment_id = db.session.scalar(sa.select(Experiment.id).where(Experiment.number == number))
        db.session.commit()
    for path in ("/api/m/projects", "/api/m/experiments", f"/api/m/experiments/{number}"):
        answer = scripted.get(path)
        assert answer.status_code == 403 and answer.get_json()["error"] == "not_for_your_role", path


def test_a_members_token_follows_their_role_and_projects_at_the_next_request(app, client, make_experiment,
                                                                            two_projects, member_client):
    from tests.integration.test_member_pages import _seed
    numbers = _seed(app, make_experiment, two_projects)
    member = member_client("ada@example.org", "collaborator", projects=(0,))
    ada = _token_client(app, member, scopes=("read",))
    assert ada.get(f"/api/m/experiments/{numbers['alpha']}").status_code == 200
    page = client.get("/settings/members")
    moved = client.post(f"/settings/members/{member.member_id}", data={
        "role": "collaborator", "projects": [two_projects[1]], "csrf_token": csrf_from(page.text)})
    assert moved.status_code == 303
    assert ada.get(f"/api/m/experiments/{numbers['alpha']}").status_code == 404
    assert [e["number"] for e in ada.get("/api/m/experiments").get_json()["experiments"]] == [numbers["beta"]]
    page = client.get("/settings/members")
    client.post(f"/settings/members/{member.member_id}", data={
        "role": "mentor", "projects": [two_projects[0]], "csrf_token": csrf_from(page.text)})
    assert ada.get("/api/m/experiments").status_code == 403  # a mentor reads no experiment
    assert [r["number"] for r in ada.get("/api/m/results").get_json()["results"]] == [numbers["alpha"]]


def test_a_members_at_claude_through_the_api_starts_no_run(app, make_experiment, two_projects, member_client,
                                                           monkeypatch):
    """Members never spend, through the API either: an @claude is a comment, no agent run."""
    from models import AgentRun
    from services.workflow import orchestration
    from tests.integration.test_member_pages import _seed
    monkeypatch.setattr(orchestration, "agents_enabled", lambda: True)
    numbers = _seed(app, make_experiment, two_projects)
    ada = _token_client(app, member_client("ada@example.org", "collaborator", projects=(0,)))
    with app.app_context():
        runs_before = db.session.scalar(sa.select(sa.func.count()).select_from(AgentRun))
    said = ada.post(f"/api/m/experiments/{numbers['alpha']}/comments", json={"body": "@claude rerun this at 350M"})
    assert said.status_code == 201
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(AgentRun)) == runs_before


def test_the_owners_tokens_page_names_a_members_token_and_may_revoke_it(app, client, two_projects, member_client):
    ada = member_client("ada@example.org", "collaborator")
    _mint(ada, name="ada notebook")
    page = client.get("/api-tokens")
    assert "ada notebook" in page.text and "ada's</span>" in page.text
    with app.app_context():
        token_id = db.session.scalar(sa.select(ApiToken.id).where(ApiToken.user_id == ada.member_id))
    assert client.post(f"/api-tokens/{token_id}/revoke", data={"csrf_token": csrf_from(page.text)}).status_code == 303
    assert "revoked" in ada.get("/welcome/tokens").text


def test_the_owners_proposal_through_the_member_routes_is_not_marked_as_a_members(app, client, two_projects):
    from models import Experiment
    csrf = csrf_from(client.get("/settings/members").text)
    made = client.post("/api/m/projects/alpha/experiments", json={"title": "Owner's own idea"},
                       headers={"X-CSRFToken": csrf})
    assert made.status_code == 201
    assert made.get_json()["experiment"]["proposedByMember"] is False
    with app.app_context():
        assert db.session.scalar(sa.select(Experiment.proposed_by_member_id)
                                 .where(Experiment.title == "Owner's own idea")) is None


def test_a_member_holds_at_most_twenty_live_tokens(app, two_projects, member_client):
    from services.core import members
    ada = member_client("ada@example.org", "collaborator")
    with app.app_context():
        account = db.session.get(User, ada.member_id)
        for i in range(members.MEMBER_TOKEN_MAX):
            members.mint_own_token(account, f"t{i}", ["read"])
        db.session.commit()
    refused = _mint(ada, name="one more")
    assert refused.status_code == 303
    assert "the most a member may" in ada.get("/welcome/tokens").text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(ApiToken)
                                 .where(ApiToken.user_id == ada.member_id)) == members.MEMBER_TOKEN_MAX
