"""Projects (SPEC §11.1, §11.4): the list, the forms and their refusals, the project page built
from beliefs and experiments in a constant number of queries, the versioned narrative, the
experiments' project and the project filters, the JSON API, and project share links."""
from __future__ import annotations

import re
import uuid
from pathlib import Path

import sqlalchemy as sa

from models import Experiment, ShareLink, db
from models.research import Belief, BeliefVersion, Project, ProjectNarrative, RecordLink
from services.core.actors import Actor
from services.planning import importer
from services.research import narratives, projects
from services.results import results, shares
from services.workflow import experiments
from tests.conftest import csrf_from
from tests.integration.queries import counting_queries

OWNER = Actor("owner", None, "Owner")
AGENT = Actor("agent", None, "analyzer")
HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "old-sagan" / "experiment-812.json"


def _project(app, title="Emergent misalignment", **fields) -> str:
    with app.app_context():
        project = projects.create_project({"title": title, **fields}, OWNER)
        db.session.commit()
        return project.slug


def _project_id(app, slug) -> uuid.UUID:
    with app.app_context():
        return projects.get_project(slug).id


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


_belief_numbers = iter(range(1, 10_000))


def _belief(app, project_id, title, status="active", **fields) -> uuid.UUID:
    """A belief written straight to its table (the beliefs' own services are another page's)."""
    with app.app_context():
        belief = Belief(id=uuid.uuid4(), number=next(_belief_numbers) + db.session.scalar(
            sa.select(sa.func.coalesce(sa.func.max(Belief.number), 0))), project_id=project_id, title=title,
            status=status, confidence=fields.pop("confidence", "MODERATE"), **fields)
        db.session.add(belief)
        db.session.commit()
        return belief.id


def _in_project(app, number, project_id) -> None:
    with app.app_context():
        experiments.get_experiment(number).project_id = project_id
        db.session.commit()


def _result(app, make_experiment, title, project_id=None, promote=True) -> int:
    """An experiment with a clean result, promoted to `shared` or left unpromoted."""
    number = make_experiment(title, status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.project_id = project_id
        results.save_clean_result(experiment, HTML, AGENT, title=title)
        if promote:
            results.promote(experiment, "shared", OWNER, confirm_lint=True)
        db.session.commit()
    return number


# --- the list and the forms ---------------------------------------------------------------

def test_the_empty_list_says_what_a_project_is(client, owner):
    """Does /projects with no project explain what one is and offer "New project", with
    Projects in the top nav?"""
    page = client.get("/projects")
    assert page.status_code == 200
    assert "No projects yet." in page.text and "overarching question" in page.text
    assert 'href="/projects/new"' in page.text
    assert re.search(r'<a href="/projects" aria-current="page">Projects</a>', page.text)
    assert '<a href="/projects"' in client.get("/").text


def test_owner_creates_a_project_and_its_slug_comes_from_the_title(app, client, owner):
    """Does the form make a project with a slug made from its title, and land on /p/<slug>
    with the question and the rendered summary?"""
    form = client.get("/projects/new")
    response = client.post("/projects/new", data={
        "csrf_token": csrf_from(form.text), "title": "Emergent Misalignment, v2!", "slug": "",
        "question": "How does narrow training generalize?", "summary_md": "**Why** it matters"})
    assert response.status_code == 303 and response.headers["Location"] == "/p/emergent-misalignment-v2"
    page = client.get("/p/emergent-misalignment-v2")
    assert page.status_code == 200
    assert "How does narrow training generalize?" in page.text and "<strong>Why</strong> it matters" in page.text
    with app.app_context():
        project = projects.get_project("emergent-misalignment-v2")
        assert project.status == "active" and project.title == "Emergent Misalignment, v2!"


def test_bad_project_input_is_refused_with_the_form_and_nothing_created(app, client, owner):
    """Are a bad slug, a taken slug, a missing title and an over-long summary refused with a
    message in the re-shown form (422), creating nothing?"""
    _project(app, "Taken", slug="taken")
    token = csrf_from(client.get("/projects/new").text)
    for data, message in (({"title": "X", "slug": "Bad Slug!"}, "may only hold lowercase letters"),
                          ({"title": "X", "slug": "-edge-"}, "may only hold lowercase letters"),
                          ({"title": "X", "slug": "taken"}, "is taken by the project “Taken”"),
                          ({"title": "Taken"}, "is taken by the project “Taken”"),
                          ({"title": "   "}, "The title is required."),
                          ({"title": "!!!"}, "no letters or digits to make a slug"),
                          ({"title": "X", "question": "q" * 5_001}, "The question is 5,001 characters"),
                          ({"title": "X", "summary_md": "y" * 200_001}, "the limit is 200,000"),
                          ({"title": "X", "summary_md": "> " * 150 + "deep"}, "nests quotes or lists")):
        page = client.post("/projects/new", data={"csrf_token": token, **data})
        assert page.status_code == 422 and message in page.text, (data, page.status_code)
        assert 'name="title"' in page.text  # the form again, with what was typed
    assert _count(app, Project) == 1


def test_a_five_megabyte_summary_is_refused_by_the_input_limits(app, client, owner):
    """Is a 5 MB summary refused before any work (413 from the request limit), nothing created?"""
    token = csrf_from(client.get("/projects/new").text)
    response = client.post("/projects/new", data={"csrf_token": token, "title": "Huge",
                                                   "summary_md": "x" * (5 * 1024 * 1024)})
    assert response.status_code == 413
    assert _count(app, Project) == 0


def test_owner_edits_a_project_and_a_taken_slug_is_refused(app, client, owner):
    """Does the edit form save the fields and move the page to its new slug, while a slug
    another project holds is refused with the page re-shown and nothing changed?"""
    slug = _project(app, "First")
    _project(app, "Second", slug="second")
    token = csrf_from(client.get(f"/p/{slug}").text)
    refused = client.post(f"/p/{slug}/edit", data={"csrf_token": token, "title": "First", "slug": "second",
                                                    "question": "Q", "summary_md": ""})
    assert refused.status_code == 422 and "is taken by the project “Second”" in refused.text
    saved = client.post(f"/p/{slug}/edit", data={"csrf_token": token, "title": "First, renamed", "slug": "renamed",
                                                  "question": "A sharper question", "summary_md": "More."})
    assert saved.status_code == 303 and saved.headers["Location"] == "/p/renamed"
    assert client.get(f"/p/{slug}").status_code == 404
    assert "A sharper question" in client.get("/p/renamed").text


def test_status_changes_and_archiving_asks_first(app, client, owner):
    """Does an unknown status get refused, archiving without the confirmation box get refused,
    and with it go through, the list showing active projects first and filtering by status?"""
    slug = _project(app, "Old work")
    _project(app, "Current work")
    token = csrf_from(client.get(f"/p/{slug}").text)
    unknown = client.post(f"/p/{slug}/status", data={"csrf_token": token, "status": "deleted"})
    assert unknown.status_code == 422 and "Status must be one of: active, paused, completed, archived." in unknown.text
    unconfirmed = client.post(f"/p/{slug}/status", data={"csrf_token": token, "status": "archived"})
    assert unconfirmed.status_code == 422 and "tick the box to confirm" in unconfirmed.text
    with app.app_context():
        assert projects.get_project(slug).status == "active"
    done = client.post(f"/p/{slug}/status", data={"csrf_token": token, "status": "archived", "confirm_archive": "1"})
    assert done.status_code == 303
    listed = client.get("/projects").text
    assert listed.index("Current work") < listed.index("Old work")
    archived = client.get("/projects?status=archived").text
    assert "Old work" in archived and "Current work" not in archived
    bad = client.get("/projects?status=gone")
    assert bad.status_code == 200 and "There is no project status “gone”" in bad.text and "Old work" not in bad.text
    assert "No paused projects." in client.get("/projects?status=paused").text


# --- the project page ---------------------------------------------------------------------

def test_the_project_page_builds_research_questions_from_beliefs(app, client, owner, make_experiment):
    """Does the page show established beliefs with the experiments cited (from belief versions
    and evidence links, both ways), open ones with their next step, results first among the
    experiments, beliefs grouped by status, and the literature's empty state?"""
    slug = _project(app, "Generalization", question="Why does it generalize?")
    pid = _project_id(app, slug)
    running = make_experiment("Still running", status="running")
    finished = _result(app, make_experiment, "Finished with a result (HIGH confidence)", pid)
    linked = make_experiment("Linked evidence")
    reverse = make_experiment("Linked from the belief")
    for number in (running, linked, reverse):
        _in_project(app, number, pid)
    established = _belief(app, pid, "Narrow training generalizes", status="supported",
                          current_belief="It does, broadly.")
    open_one = _belief(app, pid, "Defenses transfer", status="weakened", current_belief="Maybe not.",
                       next_test="Try the defense on a second model.")
    _belief(app, pid, "A withdrawn idea", status="retracted")
    with app.app_context():
        numbers = {n: experiments.get_experiment(n).id for n in (finished, linked, reverse)}
        db.session.add(BeliefVersion(id=uuid.uuid4(), belief_id=established, version=1, title="t", status="supported",
                                     confidence="HIGH", author_kind="owner", experiment_id=numbers[finished]))
        db.session.add(RecordLink(id=uuid.uuid4(), source_kind="experiment", source_id=numbers[linked],
                                  target_kind="belief", target_id=established, kind="supports", actor_kind="owner"))
        db.session.add(RecordLink(id=uuid.uuid4(), source_kind="belief", source_id=established,
                                  target_kind="experiment", target_id=numbers[reverse], kind="tests",
                                  actor_kind="owner"))
        # A link of another kind is no evidence.
        db.session.add(RecordLink(id=uuid.uuid4(), source_kind="experiment", source_id=numbers[reverse],
                                  target_kind="belief", target_id=open_one, kind="inspiration", actor_kind="owner"))
        db.session.commit()
    page = client.get(f"/p/{slug}")
    assert page.status_code == 200
    text = page.text
    questions = text[text.index('id="research-questions"'):text.index('id="experiments"')]
    assert "Established:</strong> It does, broadly." in questions
    cited = re.findall(r'href="/experiments/(\d+)">#\d+</a>', questions)
    assert sorted(map(int, cited)) == sorted([finished, linked, reverse])
    assert "Open:</strong> Maybe not." in questions and "Next step:</strong>" in questions
    assert "Try the defense on a second model." in questions and "A withdrawn idea" not in questions
    listed = text[text.index('id="experiments"'):text.index('id="beliefs"')]
    assert listed.index(f"#{finished}</span>") < listed.index(f"#{running}</span>")
    beliefs = text[text.index('id="beliefs"'):text.index('id="literature"')]
    assert "Supported" in beliefs and "Weakened" in beliefs and "Retracted" in beliefs
    assert "No literature yet." in text


def test_a_large_project_lists_the_first_beliefs_and_links_to_the_rest(app, client, owner, monkeypatch):
    """Past the page's limits, do the research questions and each status group list their
    first few and link to the beliefs list (filtered to the project, and to the status)?"""
    from services.research import projects as project_service
    monkeypatch.setattr(project_service, "PAGE_QUESTIONS", 3)
    monkeypatch.setattr(project_service, "PAGE_BELIEFS_PER_STATUS", 2)
    slug = _project(app, "Large project")
    pid = _project_id(app, slug)
    for i in range(5):
        _belief(app, pid, f"Open belief {i}", status="active")
    page = client.get(f"/p/{slug}")
    assert page.status_code == 200
    assert page.text.count('class="research-question"') == 3
    assert f'href="/beliefs?project={slug}">2 more in the beliefs list' in page.text
    assert f'href="/beliefs?project={slug}&amp;status=active">3 more active' in page.text
    listed = client.get(f"/beliefs?project={slug}&status=active")
    assert all(f"Open belief {i}" in listed.text for i in range(5))


def test_the_project_page_shows_empty_states(client, owner, app):
    """Does a new project's page say what each empty section will hold?"""
    slug = _project(app, "Fresh")
    text = client.get(f"/p/{slug}").text
    assert "No research questions yet" in text and "No experiments in this project yet" in text
    assert "No beliefs recorded" in text and "No narrative yet" in text
    assert client.get("/p/no-such-project").status_code == 404


def _fill(app, make_experiment, pid, count: int, start: int) -> None:
    for i in range(start, start + count):
        number = make_experiment(f"Experiment {i}")
        _in_project(app, number, pid)
        belief = _belief(app, pid, f"Belief {i}", status=("supported", "active", "weakened")[i % 3],
                         next_test="next")
        with app.app_context():
            experiment_id = experiments.get_experiment(number).id
            db.session.add(BeliefVersion(id=uuid.uuid4(), belief_id=belief, version=1, title="t", status="active",
                                         confidence="LOW", author_kind="owner", experiment_id=experiment_id))
            db.session.add(RecordLink(id=uuid.uuid4(), source_kind="experiment", source_id=experiment_id,
                                      target_kind="belief", target_id=belief, kind="tests", actor_kind="owner"))
            db.session.commit()


def test_the_project_page_is_a_constant_number_of_queries(app, client, owner, make_experiment):
    """Does the project page take as many SQL statements for 30 experiments and beliefs as for 3?"""
    slug = _project(app, "Counted")
    pid = _project_id(app, slug)
    with app.app_context():
        narratives.publish(projects.get_project(slug),
                           narratives.save_draft(projects.get_project(slug), "Story #1", OWNER).version, OWNER)
        db.session.commit()
    _fill(app, make_experiment, pid, 3, 0)
    with counting_queries() as few:
        assert client.get(f"/p/{slug}").status_code == 200
    _fill(app, make_experiment, pid, 27, 3)
    with counting_queries() as many:
        page = client.get(f"/p/{slug}")
        assert page.status_code == 200
    assert page.text.count('class="research-question"') == 30
    assert len(many) == len(few), (len(few), len(many))


def _link_papers_to(app, pid, count: int, start: int) -> None:
    from services.research import literature
    with app.app_context():
        for i in range(start, start + count):
            item = literature.add({"title": f"Paper {i}", "authors": [f"Ada Author{i}"], "year": 2024}).item
            db.session.add(RecordLink(id=uuid.uuid4(), source_kind="literature", source_id=item.id,
                                      target_kind="project", target_id=pid, kind="background", actor_kind="owner"))
        db.session.commit()


def test_the_project_links_panel_is_a_constant_number_of_queries(app, client, owner):
    """Does the project page's links panel take as many SQL statements for 20 papers linked to
    the project as for 2, and still name each paper?"""
    slug = _project(app, "Well read")
    pid = _project_id(app, slug)
    _link_papers_to(app, pid, 2, 0)
    with counting_queries() as few:
        assert client.get(f"/p/{slug}").status_code == 200
    _link_papers_to(app, pid, 18, 2)
    with counting_queries() as many:
        page = client.get(f"/p/{slug}")
    panel = page.text[page.text.index('id="links"'):]
    assert all(f"Author{i} 2024: Paper {i}" in panel for i in range(20))
    assert len(many) == len(few), (len(few), len(many))


# --- the narrative -------------------------------------------------------------------------

def test_narrative_drafts_publish_and_archive(app, client, owner):
    """Is each save a new draft version, does publishing one archive the one published before,
    and does the project page show only the published one, sanitized?"""
    slug = _project(app, "Story")
    page = client.get(f"/p/{slug}/narrative")
    assert "No versions yet." in page.text
    token = csrf_from(page.text)
    for body in ("First story, see #1. <script>alert(1)</script>", "Second story"):
        response = client.post(f"/p/{slug}/narrative", data={"csrf_token": token, "body_md": body})
        assert response.status_code == 303
    assert "No narrative is published yet; version 2 is a draft." in client.get(f"/p/{slug}").text
    assert client.post(f"/p/{slug}/narrative/1/publish", data={"csrf_token": token}).status_code == 303
    shown = client.get(f"/p/{slug}").text
    assert "First story" in shown and "<script>alert" not in shown and "Second story" not in shown
    assert "A newer draft (version 2) is not published." in shown
    client.post(f"/p/{slug}/narrative/2/publish", data={"csrf_token": token})
    with app.app_context():
        rows = {r.version: r.status for r in db.session.scalars(sa.select(ProjectNarrative))}
    assert rows == {1: "archived", 2: "published"}
    versions = client.get(f"/p/{slug}/narrative").text
    assert "Version 1" in versions and "Version 2" in versions
    one = client.get(f"/p/{slug}/narrative/1")
    assert one.status_code == 200 and "First story" in one.text and "Publish this version" in one.text
    assert client.get(f"/p/{slug}/narrative/9").status_code == 404
    assert client.post(f"/p/{slug}/narrative/9/publish", data={"csrf_token": token}).status_code == 404


def test_an_empty_or_oversized_narrative_is_refused(app, client, owner):
    """Are an empty narrative and one over the markdown limit refused with the editor re-shown
    holding what was typed, and no version saved?"""
    slug = _project(app, "Story")
    token = csrf_from(client.get(f"/p/{slug}/narrative").text)
    empty = client.post(f"/p/{slug}/narrative", data={"csrf_token": token, "body_md": "  \u200b "})
    assert empty.status_code == 422 and "The narrative is empty" in empty.text
    big = client.post(f"/p/{slug}/narrative", data={"csrf_token": token, "body_md": "z" * 200_001})
    assert big.status_code == 422 and "the limit is 200,000" in big.text
    assert _count(app, ProjectNarrative) == 0


# --- experiments in a project ----------------------------------------------------------------

def test_the_experiment_form_sets_the_project_and_the_page_links_it(app, client, owner):
    """Does the new-experiment form (preselected from the project page) put the experiment in
    the project, its page link to the project, and an unknown project get refused?"""
    slug = _project(app, "Home")
    pid = _project_id(app, slug)
    form = client.get(f"/experiments/new?project={slug}")
    assert f'<option value="{pid}" selected>Home</option>' in form.text
    created = client.post("/experiments/new", data={"csrf_token": csrf_from(form.text), "title": "In a project",
                                                     "project_id": str(pid)})
    number = int(created.headers["Location"].rsplit("/", 1)[1])
    page = client.get(f"/experiments/{number}")
    assert f'<a href="/p/{slug}">Home</a>' in page.text
    refused = client.post(f"/experiments/{number}/edit", data={"csrf_token": csrf_from(page.text),
                                                               "title": "In a project", "project_id": str(uuid.uuid4())},
                          follow_redirects=True)
    assert "No project with the id" in refused.text
    cleared = client.post(f"/experiments/{number}/edit", data={"csrf_token": csrf_from(page.text),
                                                               "title": "In a project", "project_id": ""})
    assert cleared.status_code in (302, 303)
    with app.app_context():
        assert experiments.get_experiment(number).project_id is None


def test_board_table_and_results_filter_by_project(app, client, owner, make_experiment):
    """Do the board, the table and the results list show only the project's experiments with
    `?project=<slug>`, and an unknown slug an empty list with a message, not a 500?"""
    slug = _project(app, "Mine")
    pid = _project_id(app, slug)
    mine = _result(app, make_experiment, "Mine has a result (LOW confidence)", pid)
    theirs = _result(app, make_experiment, "Theirs has a result (LOW confidence)")
    for url in ("/board", "/experiments", "/results"):
        both = client.get(url).text
        assert "Mine has a result" in both and "Theirs has a result" in both, url
        only = client.get(f"{url}?project={slug}")
        assert only.status_code == 200 and "Mine has a result" in only.text, url
        assert "Theirs has a result" not in only.text, url
        assert f'<option value="{slug}" selected>Mine</option>' in only.text, url
        unknown = client.get(f"{url}?project=nope")
        assert unknown.status_code == 200, url
        assert "No project is called “nope”, so nothing matches." in unknown.text, url
        assert "Mine has a result" not in unknown.text and "Theirs has a result" not in unknown.text, url
    # The table's htmx swap answers its fragment alone, filtered.
    fragment = client.get(f"/experiments?project={slug}", headers={"HX-Request": "true"})
    assert 'id="experiments-table"' in fragment.text and "<html" not in fragment.text
    assert "Mine has a result" in fragment.text and "Theirs has a result" not in fragment.text
    # The board's poll keeps the filter.
    board = client.get(f"/board?project={slug}").text
    assert f'hx-get="/board/columns?project={slug}"' in board
    columns = client.get(f"/board/columns?project={slug}")
    assert f"#{mine}" in columns.text and f"#{theirs}" not in columns.text


# --- the API ---------------------------------------------------------------------------------

def test_the_projects_api(app, api_client):
    """Do /api/projects list and create and /api/projects/<slug> read and patch, camelCase,
    with read and write scopes, and does an experiment take `projectId`?"""
    writer = api_client("read,write")
    reader = api_client("read")
    created = writer.post("/api/projects", json={"title": "Via the API", "question": "Q?", "summaryMd": "S"})
    assert created.status_code == 201
    body = created.get_json()["project"]
    assert body["slug"] == "via-the-api" and body["summaryMd"] == "S" and body["status"] == "active"
    assert reader.post("/api/projects", json={"title": "No"}).status_code == 403
    listed = reader.get("/api/projects").get_json()["projects"]
    assert [p["slug"] for p in listed] == ["via-the-api"] and listed[0]["experimentCount"] == 0
    experiment = writer.post("/api/experiments", json={"title": "E", "projectId": body["id"]})
    assert experiment.status_code == 201 and experiment.get_json()["experiment"]["projectId"] == body["id"]
    patched = writer.patch("/api/projects/via-the-api", json={"status": "paused", "slug": "renamed"})
    assert patched.status_code == 200 and patched.get_json()["project"]["slug"] == "renamed"
    writer.post("/api/experiments", json={"title": "Outside"})
    in_project = reader.get("/api/experiments?project=renamed").get_json()["experiments"]
    assert [e["title"] for e in in_project] == ["E"]
    unknown = reader.get("/api/experiments?project=nope")
    assert unknown.status_code == 400 and unknown.get_json()["field"] == "project"
    read = reader.get("/api/projects/renamed").get_json()
    assert read["project"]["status"] == "paused" and read["project"]["experimentCount"] == 1
    assert read["publishedNarrative"] is None
    assert reader.patch("/api/projects/renamed", json={"status": "active"}).status_code == 403


def test_the_projects_api_refuses_bad_input(app, api_client):
    """Are an unknown status, a bad or taken slug, an unknown field, an unknown project and an
    experiment's unknown projectId answered 400/404 with a message, nothing changed?"""
    writer = api_client("read,write")
    _project(app, "Taken", slug="taken")
    for payload, field in (({"title": "X", "status": "deleted"}, "status"), ({"title": "X", "slug": "Nope!"}, "slug"),
                           ({"title": "X", "slug": "taken"}, "slug"), ({"title": "X", "colour": "red"}, "colour"),
                           ({"slug": "no-title"}, "title"), ({"title": 7}, "title")):
        response = writer.post("/api/projects", json=payload)
        assert response.status_code == 400, payload
        assert response.get_json()["field"] == field and response.get_json()["message"], payload
    assert writer.post("/api/projects", json={"title": "Taken"}).get_json()["error"] == "slug_taken"
    assert writer.patch("/api/projects/taken", json={"status": "gone"}).status_code == 400
    assert writer.get("/api/projects/missing").status_code == 404
    assert writer.get("/api/projects?status=gone").status_code == 400
    for bad in (str(uuid.uuid4()), "taken", 12):
        response = writer.post("/api/experiments", json={"title": "E", "projectId": bad})
        assert response.status_code == 400 and response.get_json()["field"] == "project_id", bad
    assert _count(app, Project) == 1 and _count(app, Experiment) == 0


def test_the_importer_keeps_a_project_that_maps(app):
    """Does an import keep the old `projectId` when a project with that id is here, and come
    in without one (saying so) when it is not?"""
    import json
    doc = json.loads(FIXTURE.read_text())
    known = uuid.uuid4()
    with app.app_context():
        db.session.add(Project(id=known, slug="old", title="Old project", status="active"))
        doc["experiment"]["projectId"] = str(known)
        importer.import_document(doc)
        db.session.commit()
        assert experiments.get_experiment(812).project_id == known
    with app.app_context():
        other = json.loads(FIXTURE.read_text())
        other["experiment"].update(id=str(uuid.uuid4()), number="813", projectId=str(uuid.uuid4()))
        for event in other["events"]:
            event["id"] = str(uuid.uuid4())
        other["approvalRequests"] = []
        report = importer.import_document(other)
        db.session.commit()
        assert experiments.get_experiment(813).project_id is None
        assert any("imported without a project" in message for message in report.messages)


# --- sharing a project -----------------------------------------------------------------------

def test_owner_shares_a_project_and_the_link_shows_only_what_is_public(app, client, owner, make_experiment):
    """Does the project page create a link (shown once) whose page shows the published
    narrative, the project's promoted results and its stated beliefs' public text — never a
    draft narrative, an unpromoted result, another project's result, a draft belief, evidence
    or a proposal?"""
    slug = _project(app, "Shared project", question="What is shared?")
    pid = _project_id(app, slug)
    other = _project_id(app, _project(app, "Other project"))
    promoted = _result(app, make_experiment, "Promoted finding (HIGH confidence)", pid)
    _result(app, make_experiment, "Unpromoted finding (LOW confidence)", pid, promote=False)
    _result(app, make_experiment, "Other project's finding (HIGH confidence)", other)
    _belief(app, pid, "Stated belief", status="supported", current_belief="Publicly stated.",
            evidence="Private evidence notes", counterevidence="Private counterevidence")
    _belief(app, pid, "Draft belief", status="draft", current_belief="Not yet stated.")
    with app.app_context():
        project = projects.get_project(slug)
        published = narratives.save_draft(project, f"The published story, see #{promoted}.", OWNER)
        narratives.publish(project, published.version, OWNER)
        narratives.save_draft(project, "An unpublished draft story.", OWNER)
        db.session.commit()
    page = client.get(f"/p/{slug}")
    response = client.post(f"/p/{slug}/share-links", data={"csrf_token": csrf_from(page.text), "label": "For Ada"},
                           follow_redirects=True)
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    url = re.search(r'id="new-share-url" type="text" readonly value="([^"]+)"', response.text).group(1)
    token = url.rsplit("/", 1)[1]
    assert token not in client.get(f"/p/{slug}").text  # shown once
    with app.app_context():
        link = db.session.scalar(sa.select(ShareLink))
        assert link.scope == "project" and link.project_id == pid and link.label == "For Ada"
    mentor = app.test_client()
    shared = mentor.get(f"/s/{token}")
    assert shared.status_code == 200 and "set-cookie" not in {k.lower() for k in shared.headers.keys()}
    text = shared.text
    assert "Shared project" in text and "What is shared?" in text
    assert "The published story" in text and f'href="/s/{token}/{promoted}"' in text
    assert "Promoted finding" in text and "Stated belief" in text and "Publicly stated." in text
    for hidden in ("unpublished draft story", "Unpromoted finding", "Other project&#39;s finding",
                   "Other project's finding", "Draft belief", "Not yet stated", "Private evidence notes",
                   "Private counterevidence", "csrf_token", "<form"):
        assert hidden not in text, hidden
    assert mentor.get(f"/s/{token}/{promoted}").status_code == 200
    with app.app_context():
        numbers = {e.title: e.number for e in db.session.scalars(sa.select(Experiment))}
    assert mentor.get(f"/s/{token}/{numbers['Unpromoted finding (LOW confidence)']}").status_code == 404
    assert mentor.get(f"/s/{token}/{numbers['Other project' + chr(39) + 's finding (HIGH confidence)']}"
                      ).status_code == 404
    # Settings lists it under its project, and revoking it there ends it.
    settings = client.get("/settings").text
    assert f'<a href="/p/{slug}">Shared project</a>' in settings
    client.post(f"/settings/share-links/{link.id}/revoke", data={"csrf_token": csrf_from(settings)})
    assert mentor.get(f"/s/{token}").status_code == 404


def test_a_project_share_link_form_refuses_a_bad_expiry(app, client, owner):
    """Is a bad expiry refused on the project page with the message, no link created?"""
    slug = _project(app, "Shared")
    page = client.post(f"/p/{slug}/share-links", data={"csrf_token": csrf_from(client.get(f"/p/{slug}").text),
                                                       "expires_in_days": "soon"}, follow_redirects=True)
    assert page.status_code == 200 and "Expiry must be a whole number" in page.text
    assert _count(app, ShareLink) == 0


def test_a_project_link_without_a_published_narrative_says_so(app, make_experiment):
    """Does a project link with nothing published yet show empty states, not a draft?"""
    slug = _project(app, "Quiet")
    with app.app_context():
        project = projects.get_project(slug)
        narratives.save_draft(project, "Secret draft", OWNER)
        _link, token = shares.create_link(scope="project", project=project)
        db.session.commit()
    text = app.test_client().get(f"/s/{token}").text
    assert "No narrative has been published yet." in text and "Secret draft" not in text
    assert "No results have been shared yet." in text and "No beliefs have been stated yet." in text


# --- the embedded default's database -----------------------------------------------------------

def test_projects_work_on_sqlite(tmp_path):
    """On the embedded default (SQLite, migrated as `make run` does), do the project API, the
    project page with its research questions, the filters, the narrative and a project link
    work as on PostgreSQL?"""
    import flask_migrate

    from services.core.auth import create_owner, create_token
    from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD
    from tests.integration.test_migrations import MIGRATIONS, _scratch_app

    app = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS)
            create_owner(OWNER_EMAIL, OWNER_PASSWORD)
            _, secret = create_token("lite writer", "read,write")
            db.session.commit()
        api = app.test_client()
        api.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
        project = api.post("/api/projects", json={"title": "Lite project"}).get_json()["project"]
        api.post("/api/projects", json={"title": "Other"})
        number = api.post("/api/experiments", json={"title": "Lite experiment", "projectId": project["id"]}
                          ).get_json()["experiment"]["number"]
        api.post("/api/experiments", json={"title": "Elsewhere"})
        listed = api.get("/api/projects").get_json()["projects"]
        assert {p["slug"]: p["experimentCount"] for p in listed} == {"lite-project": 1, "other": 0}
        with app.app_context():
            pid = uuid.UUID(project["id"])
            belief = _belief(app, pid, "Lite belief", status="supported", current_belief="Holds.")
            db.session.add(RecordLink(id=uuid.uuid4(), source_kind="experiment",
                                      source_id=experiments.get_experiment(number).id, target_kind="belief",
                                      target_id=belief, kind="tests", actor_kind="owner"))
            row = projects.get_project("lite-project")
            narratives.publish(row, narratives.save_draft(row, "Lite story", OWNER).version, OWNER)
            _link, token = shares.create_link(scope="project", project=row)
            db.session.commit()
        client = app.test_client()
        page = client.get("/login")
        client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                    "csrf_token": csrf_from(page.text)})
        shown = client.get("/p/lite-project").text
        assert "Established:</strong> Holds." in shown and f">#{number}</a>" in shown and "Lite story" in shown
        for url in ("/board", "/experiments"):
            filtered = client.get(f"{url}?project=lite-project").text
            assert "Lite experiment" in filtered and "Elsewhere" not in filtered, url
        assert "Lite story" in app.test_client().get(f"/s/{token}").text
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
