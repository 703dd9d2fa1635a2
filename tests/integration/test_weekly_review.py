"""The weekly review (SPEC §12.3): drafted from a week of the record (results with confidence,
belief changes, failures and why, spend split by run classification, proposals), once per
week however often the job runs; edited as versions (a stale edit is a 409); published; shown
to a mentor through a share link as the mentor update — only the published version, without
costs, drafts or runs; run classification from the run page and the API; the agent against
the Anthropic fake; bad input refused with a sentence and nothing changed."""
from __future__ import annotations

import re
import threading
import uuid
from datetime import datetime, time, timedelta, timezone

import pytest
import sqlalchemy as sa

from models import AgentRun, Belief, ShareLink, WeeklyReview, WeeklyReviewVersion, WorkflowEvent, db
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, NotFound, ValidationError
from services.day import daily_log, weekly_review
from services.research import links, projects
from services.results import results, shares
from services.workflow import experiments, runs
from tests.conftest import csrf_from
from tests.fakes.anthropic_server import reply, text, tool_use
from tests.integration.queries import counting_queries
from workers import scheduler

OWNER = Actor("owner", None, "Ada")
AGENT = Actor("agent", None, "analyzer")


def _count(model) -> int:
    return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def _run(experiment_id, agent: str, cost, classification="pending", status="completed", reason=None, error=None):
    run = runs.create_run(kind="apply", agent=agent, request=f"{agent} work.", scope_id=experiment_id)
    run.cost_usd, run.status, run.classification = cost, status, classification
    run.failure_reason, run.last_error = reason, error
    return run


@pytest.fixture
def seeded_week(app, make_experiment):
    """This week: a result landed (MODERATE confidence) in a project, a belief changed on it, an
    experiment failed with a reason, a run failed, runs of each classification, a proposal."""
    landed = make_experiment("Insecure code, 3 seeds", status="awaiting_promotion")
    broken = make_experiment("Sweep at 7B", status="running")
    proposed = make_experiment("Replicate at 1B")
    with app.app_context():
        project = projects.create_project({"title": "Emergent misalignment"}, OWNER)
        db.session.flush()
        first, second = experiments.get_experiment(landed), experiments.get_experiment(broken)
        first.project_id = project.id
        results.save_clean_result(first, "<p>Misalignment emerges in 2 of 3 seeds.</p>", AGENT,
                                  title="Misalignment emerges (MODERATE confidence)")
        db.session.add(Belief(id=uuid.uuid4(), number=1, project_id=project.id, title="Narrow finetuning generalizes",
                              current_belief="It does, on insecure code.", status="supported", confidence="MODERATE",
                              next_test="Try a 1B model."))
        db.session.add(Belief(id=uuid.uuid4(), number=2, project_id=project.id, title="Seeds matter",
                              current_belief="Unclear.", status="active", confidence="LOW",
                              next_test="Run 5 more seeds."))
        db.session.flush()
        links.create_link(links.parse_reference(f"#{landed}"), "supports", links.parse_reference("B1"), OWNER)
        db.session.add(WorkflowEvent(entity_id=second.id, experiment_id=second.id, event_type="state_changed",
                                     from_status="running", to_status="failed", actor_kind="system",
                                     note="CUDA out of memory at step 400", created_at=utcnow()))
        _run(first.id, "analyzer", 1.5, "useful")
        _run(second.id, "experiment-planner", 0.5, "not_useful")
        _run(second.id, "pod-provisioner", 0.25, status="failed", reason="provider_capacity", error="no GPU available")
        _run(first.id, "clean-result-critic", 0.1, "archived")
        db.session.commit()
        this_week = weekly_review.week_end_for(daily_log.today())
    return {"landed": landed, "broken": broken, "proposed": proposed, "week": this_week}


# --- drafting --------------------------------------------------------------------------------

def test_a_review_is_drafted_from_the_weeks_record_citing_experiments(app, seeded_week):
    """Does the record's draft say what was learned with its confidence, the failures and why,
    the spend split by classification and the proposals, each citing its experiment as #N?"""
    with app.app_context():
        review, created = weekly_review.draft(seeded_week["week"], "owner")
        assert created and review.week_end == seeded_week["week"]
        body = weekly_review.latest(review).body_md
        summary = review.summary
    n = seeded_week
    assert f"- Misalignment emerges (#{n['landed']}, MODERATE confidence)" in body
    assert f"- Sweep at 7B (#{n['broken']}) — failed: CUDA out of memory at step 400" in body
    assert f"- Sweep at 7B (#{n['broken']}) — pod-provisioner run failed: provider capacity: no GPU available" in body
    assert not re.search(r"^\s*(- )?#\d", body, re.M)  # never where markdown reads a heading
    assert f"- Run #{n['proposed']}: Replicate at 1B" in body and "Test B2 (Seeds matter): Run 5 more seeds." in body
    split = summary["spend"]["agentsByClassification"]
    assert split["useful"]["usd"] == 1.5 and split["not_useful"]["usd"] == 0.5
    assert split["pending"] == {"usd": 0.25, "runs": 1, "unpriced": 0} and split["archived"]["usd"] == 0.1
    assert "useful $1.50, not useful $0.50, unclassified $0.25, archived $0.10" in body
    assert summary["spend"]["agentsUsd"] == pytest.approx(2.35)


def test_gathering_a_week_is_a_constant_number_of_queries(app, seeded_week, make_experiment):
    """Does gathering cost the same queries with five times the record?"""
    with app.app_context():
        with counting_queries() as few:
            weekly_review.gather(seeded_week["week"])
    for index in range(4):
        number = make_experiment(f"More {index}", status="awaiting_promotion")
        with app.app_context():
            experiment = experiments.get_experiment(number)
            results.save_clean_result(experiment, "<p>More.</p>", AGENT, title=f"More {index} (LOW confidence)")
            _run(experiment.id, "analyzer", 0.2, "useful")
            db.session.commit()
    with app.app_context():
        with counting_queries() as many:
            weekly_review.gather(seeded_week["week"])
    assert len(many) == len(few)


def test_drafting_twice_leaves_one_review(app, seeded_week):
    """Does a second draft of the week (a job run twice) answer the first review, unchanged?"""
    with app.app_context():
        first, created = weekly_review.draft(seeded_week["week"], "scheduler")
        again, created_again = weekly_review.draft(seeded_week["week"], "owner")
        assert created and not created_again and again.id == first.id
        assert _count(WeeklyReview) == 1 and _count(WeeklyReviewVersion) == 1


def test_two_jobs_racing_on_a_week_leave_one_review(app, seeded_week):
    """When another job inserts the week after our check and before our insert, is ours refused
    quietly, answering theirs, with no second review?"""
    week = seeded_week["week"]
    answer = {}

    def ours():
        with app.app_context():
            review, created = weekly_review.draft(week, "scheduler")
            answer.update(id=review.id, created=created)
            db.session.remove()

    with app.app_context():
        now = utcnow()
        theirs_id = uuid.uuid4()
        with db.engine.connect() as theirs:
            theirs.execute(sa.insert(WeeklyReview.__table__).values(
                id=theirs_id, week_end=week, time_zone="UTC", summary={}, drafted_at=now, drafted_by="owner",
                created_at=now, updated_at=now))
            racer = threading.Thread(target=ours)
            racer.start()
            racer.join(0.5)  # ours saw no row and now waits on their uncommitted insert
            theirs.commit()
        racer.join(10)
        assert not racer.is_alive() and answer == {"id": theirs_id, "created": False}
        assert _count(WeeklyReview) == 1


def test_the_scheduler_leaves_a_week_in_which_nothing_happened(app, seeded_week):
    """A week with no experiment event, agent run or belief change (a new install's first, a
    holiday) is not drafted by the scheduler — no paid agent run for an empty page — while the
    owner can still draft it by hand."""
    empty_week = seeded_week["week"] - timedelta(days=70)
    after = datetime.combine(empty_week, time(weekly_review.DEFAULT_HOUR, 1), tzinfo=timezone.utc)
    with app.app_context():
        assert weekly_review.due_week_end(after) == empty_week
        assert not weekly_review.week_has_record(empty_week) and weekly_review.week_has_record(seeded_week["week"])
        assert weekly_review.draft_due(after) is None and weekly_review.by_week(empty_week) is None
        review, created = weekly_review.draft(empty_week, "owner", after)
        assert created and review.week_end == empty_week


def test_the_scheduler_drafts_once_the_day_and_hour_have_come(app, seeded_week):
    """Is nothing drafted before the review day's hour, one review after it, and none more on the next ticks?"""
    week = seeded_week["week"]
    hour = weekly_review.DEFAULT_HOUR
    before = datetime.combine(week, time(hour - 1, 59), tzinfo=timezone.utc)
    after = datetime.combine(week, time(hour, 1), tzinfo=timezone.utc)
    with app.app_context():
        assert weekly_review.due_week_end(before) == week - timedelta(days=7)
        assert weekly_review.due_week_end(after) == week
        assert weekly_review.draft_due(after).week_end == week
        assert weekly_review.draft_due(after) is None
        scheduler.tick(app)  # the real tick: the week before was never drafted, this one is
        assert db.session.scalar(sa.select(sa.func.count()).select_from(WeeklyReview)
                                 .where(WeeklyReview.week_end == week)) == 1


def test_the_review_day_and_hour_come_from_settings(app, seeded_week):
    """Does a Saturday 09:00 schedule move the week's end, and a bad day or hour refuse to save?"""
    with app.app_context():
        weekly_review.save_schedule("Saturday", "9")
        db.session.commit()
        assert weekly_review.schedule() == ("saturday", 9)
        assert weekly_review.week_end_for(seeded_week["week"]).weekday() == 5
        for day, hour, message in (("someday", 9, "day of the week"), ("monday", 24, "from 0 to 23"),
                                   ("monday", "x", "from 0 to 23")):
            with pytest.raises(ValidationError, match=message):
                weekly_review.save_schedule(day, hour)
        db.session.rollback()
        assert weekly_review.schedule() == ("saturday", 9)


def test_the_settings_page_saves_the_schedule_and_refuses_a_bad_hour(app, client, owner):
    page = client.get("/settings")
    assert 'id="weekly-review"' in page.text
    bad = client.post("/settings/weekly-review", data={"csrf_token": csrf_from(page.text), "day": "friday",
                                                       "hour": "25"})
    assert bad.status_code == 422 and "from 0 to 23" in bad.text
    with app.app_context():
        assert weekly_review.schedule() == ("sunday", 18)
    saved = client.post("/settings/weekly-review", data={"csrf_token": csrf_from(page.text), "day": "friday",
                                                         "hour": "7"})
    assert saved.status_code == 303
    with app.app_context():
        assert weekly_review.schedule() == ("friday", 7)


def test_a_misspelt_review_day_stops_start_up():
    from app import create_app
    from config import TestConfig

    class Misspelt(TestConfig):
        SAGAN_WEEKLY_REVIEW_DAY = "sundy"
    with pytest.raises(ValueError, match="SAGAN_WEEKLY_REVIEW_DAY"):
        create_app(Misspelt)


# --- versions and publishing -------------------------------------------------------------------

def test_edits_are_versions_a_stale_edit_is_refused_and_publishing_archives_the_last(app, seeded_week):
    with app.app_context():
        review, _ = weekly_review.draft(seeded_week["week"], "owner")
        second = weekly_review.save_version(review, "# Week\n\nWe learned a lot (#1).", OWNER, base_version=1)
        db.session.commit()
        with pytest.raises(Conflict, match="Version 2 was saved after the version 1 you edited"):
            weekly_review.save_version(review, "Stale edit.", OWNER, base_version=1)
        db.session.rollback()
        with pytest.raises(ValidationError, match="The review is empty"):
            weekly_review.save_version(review, "  \n ", OWNER)
        db.session.rollback()
        weekly_review.publish(review, 1, OWNER)
        weekly_review.publish(review, second.version, OWNER)
        db.session.commit()
        statuses = [(v.version, v.status) for v in weekly_review.versions(review)]
        assert statuses == [(2, "published"), (1, "archived")]
        assert weekly_review.published(review.id).questions[0]["project"] == "Emergent misalignment"


# --- pages ---------------------------------------------------------------------------------------

def test_pages_draft_edit_publish_and_share_with_a_mentor(app, client, owner, worker, seeded_week):
    """The owner's whole round: empty list, Draft now (a job), edit, publish, share; the mentor
    with no cookie sees the published version only, as the mentor update, with nothing private."""
    week = seeded_week["week"].isoformat()
    listing = client.get("/reviews")
    assert listing.status_code == 200 and "No weekly review yet" in listing.text
    assert 'href="/reviews"' in client.get("/log").text  # the owner's day: the log leads to the reviews
    queued = client.post("/reviews/draft", data={"csrf_token": owner.csrf(), "week": week})
    assert queued.status_code == 303 and queued.headers["Location"].endswith(f"/reviews/{week}")
    assert "Drafting the review" in client.get(f"/reviews/{week}").text
    worker()
    page = client.get(f"/reviews/{week}")
    assert page.status_code == 200 and "Misalignment emerges" in page.text and "data-confirm=" in page.text
    saved = client.post(f"/reviews/{week}/versions", data={
        "csrf_token": csrf_from(page.text), "base_version": "1",
        "body_md": f"# This week\n\nMisalignment emerges (#{seeded_week['landed']}).\n\n## Spend\n\n- $2.35 on agents"})
    assert saved.status_code == 303
    page = client.get(f"/reviews/{week}")
    assert "Version 2" in page.text
    # A link made before publishing says so and shows nothing.
    client.post(f"/reviews/{week}/share-links", data={"csrf_token": csrf_from(page.text), "label": "For Ada"})
    page = client.get(f"/reviews/{week}")
    url = re.search(r'id="new-share-url" type="text" readonly value="([^"]+)"', page.text).group(1)
    token = url.rsplit("/", 1)[1]
    mentor = app.test_client()
    early = mentor.get(f"/s/{token}")
    assert early.status_code == 200 and "Nothing published yet" in early.text and "Misalignment" not in early.text
    published = client.post(f"/reviews/{week}/versions/2/publish", data={"csrf_token": csrf_from(page.text)})
    assert published.status_code == 303
    # A later draft waits for the next publish.
    page = client.get(f"/reviews/{week}")
    client.post(f"/reviews/{week}/versions", data={"csrf_token": csrf_from(page.text), "base_version": "2",
                                                   "body_md": "Secret next draft."})
    shown = mentor.get(f"/s/{token}")
    assert shown.status_code == 200 and "set-cookie" not in {k.lower() for k in shown.headers.keys()}
    assert shown.headers["Referrer-Policy"] == "no-referrer" and shown.headers["X-Robots-Tag"].startswith("noindex")
    body = shown.text
    assert "Research questions" in body and "Established" in body and "Open question" in body
    assert "Narrow finetuning generalizes" in body and "Next step" in body and "Run 5 more seeds." in body
    assert f"It does, on insecure code. <span class=\"cites\">(#{seeded_week['landed']})</span>" in body
    assert f"Misalignment emerges (#{seeded_week['landed']})" in body
    for private in ("Secret next draft", "$2.35", "Spend", "analyzer", "experiment-planner", "csrf_token", "<form",
                    "/experiments/", "/runs/", "CUDA out of memory", "Drafted from the record"):
        assert private not in body, private
    with app.app_context():
        link = db.session.scalar(sa.select(ShareLink))
        assert link.scope == "weekly_review" and link.use_count == 2


def test_a_tampered_or_revoked_review_link_is_a_404(app, seeded_week):
    with app.app_context():
        review, _ = weekly_review.draft(seeded_week["week"], "owner")
        weekly_review.publish(review, 1, OWNER)
        link, token = shares.create_link(scope="weekly_review", weekly_review=review)
        db.session.commit()
        link_id = link.id
    mentor = app.test_client()
    assert mentor.get(f"/s/{token}").status_code == 200
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert mentor.get(f"/s/{tampered}").status_code == 404
    with app.app_context():
        shares.revoke(link_id)
        db.session.commit()
    assert mentor.get(f"/s/{token}").status_code == 404


def test_a_stale_or_empty_edit_on_the_page_keeps_the_text_and_changes_nothing(app, client, owner, seeded_week):
    week = seeded_week["week"].isoformat()
    with app.app_context():
        review, _ = weekly_review.draft(seeded_week["week"], "owner")
        weekly_review.save_version(review, "Someone else's edit.", OWNER)
        db.session.commit()
    page = client.get(f"/reviews/{week}")
    stale = client.post(f"/reviews/{week}/versions", data={"csrf_token": csrf_from(page.text), "base_version": "1",
                                                           "body_md": "My careful edit."})
    assert stale.status_code == 409 and "reload the review" in stale.text and "My careful edit." in stale.text
    empty = client.post(f"/reviews/{week}/versions", data={"csrf_token": csrf_from(page.text), "base_version": "2",
                                                           "body_md": "   "})
    assert empty.status_code == 422 and "The review is empty" in empty.text
    no_csrf = client.post(f"/reviews/{week}/versions", data={"base_version": "2", "body_md": "Forged."})
    assert no_csrf.status_code in (400, 403)
    with app.app_context():
        assert _count(WeeklyReviewVersion) == 2


@pytest.mark.parametrize("path, status", [("/reviews/2001-01-07", 200), ("/reviews/2001-01-08", 404),
                                          ("/reviews/not-a-week", 404), ("/reviews/2999-01-04", 404)])
def test_unknown_weeks_and_reviews(app, client, owner, path, status):
    """A past review day without a review is an empty page with Draft; anything else is a 404."""
    with app.app_context():
        weekly_review.save_schedule("sunday", 18)
        db.session.commit()
    answer = client.get(path)
    assert answer.status_code == status
    if status == 200:
        assert "This week has no review yet" in answer.text


def test_drafting_a_bad_week_from_the_page_queues_nothing(app, client, owner):
    answer = client.post("/reviews/draft", data={"csrf_token": owner.csrf(), "week": "2026-02-30"})
    assert answer.status_code == 400 and "not a date on the calendar" in answer.text
    with app.app_context():
        assert not weekly_review.drafting(datetime(2026, 3, 1).date())


# --- run classification ------------------------------------------------------------------------------

def test_the_owner_classifies_a_run_on_its_page_and_the_agent_never_overrides_it(app, client, owner, seeded_week):
    with app.app_context():
        run = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "pod-provisioner"))
        run_id = run.id
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200 and 'name="classification"' in page.text
    answer = client.post(f"/runs/{run_id}/classification", data={"csrf_token": csrf_from(page.text),
                                                                 "classification": "not_useful"})
    assert answer.status_code == 303
    bad = client.post(f"/runs/{run_id}/classification", data={"csrf_token": csrf_from(page.text),
                                                              "classification": "great"})
    assert bad.status_code == 200 and "classification is one of" in bad.text
    with app.app_context():
        run = db.session.get(AgentRun, run_id)
        assert (run.classification, run.classification_by) == ("not_useful", "owner")
        assert not runs.classify(run, "useful", "agent") and run.classification == "not_useful"


@pytest.mark.parametrize("body, status, message", [
    ({"classification": "great"}, 400, "classification is one of"), ({}, 400, "classification is one of"),
    ({"classification": "useful", "why": "x"}, 400, "Unknown field")])
def test_the_api_refuses_bad_classifications(app, api_client, seeded_week, body, status, message):
    with app.app_context():
        run_id = db.session.scalar(sa.select(AgentRun.id).where(AgentRun.agent == "analyzer"))
    answer = api_client().post(f"/api/runs/{run_id}/classification", json=body)
    assert answer.status_code == status and message in answer.json["message"]
    with app.app_context():
        assert db.session.get(AgentRun, run_id).classification == "useful"
    assert api_client().post(f"/api/runs/{uuid.uuid4()}/classification",
                             json={"classification": "useful"}).status_code == 404


def test_the_api_classifies_drafts_saves_and_publishes(app, api_client, worker, seeded_week):
    client = api_client()
    week = seeded_week["week"].isoformat()
    with app.app_context():
        run_id = db.session.scalar(sa.select(AgentRun.id).where(AgentRun.agent == "pod-provisioner"))
    classified = client.post(f"/api/runs/{run_id}/classification", json={"classification": "not_useful"})
    assert classified.status_code == 200 and classified.json["run"]["classificationBy"] == "owner"
    queued = client.post("/api/reviews", json={"week": week})
    assert queued.status_code == 202 and queued.json == {"queued": True, "weekEnd": week}
    worker()
    again = client.post("/api/reviews", json={"week": week})
    assert again.status_code == 200 and again.json["queued"] is False
    review = client.get(f"/api/reviews/{week}").json["review"]
    assert review["latestVersion"] == 1 and review["summary"]["spend"]["agentsByClassification"]["not_useful"][
        "usd"] == 0.75
    saved = client.post(f"/api/reviews/{week}/versions", json={"bodyMd": "New text.", "baseVersion": 1})
    assert saved.status_code == 201 and saved.json["version"]["version"] == 2
    stale = client.post(f"/api/reviews/{week}/versions", json={"bodyMd": "Stale.", "baseVersion": 1})
    assert stale.status_code == 409
    published = client.post(f"/api/reviews/{review['id']}/publish", json={"version": 2})
    assert published.status_code == 200 and published.json["review"]["publishedVersion"] == 2
    assert [r["weekEnd"] for r in client.get("/api/reviews").json["reviews"]] == [week]


@pytest.mark.parametrize("method, path, body, status, message", [
    ("post", "/api/reviews", {"week": "2026-12-07x"}, 400, "YYYY-MM-DD"),
    ("post", "/api/reviews", {"week": 20261206}, 400, "YYYY-MM-DD"),
    ("post", "/api/reviews", {"when": "x"}, 400, "Unknown field"),
    ("get", "/api/reviews/2001-01-07", None, 404, "No weekly review"),
    ("post", "/api/reviews/2001-01-07/versions", {"bodyMd": "x"}, 404, "No weekly review"),
    ("post", "/api/reviews/{week}/versions", {"bodyMd": ""}, 400, "The review is empty"),
    ("post", "/api/reviews/{week}/versions", {"bodyMd": "x", "baseVersion": "one"}, 400, "base version"),
    ("post", "/api/reviews/{week}/publish", {}, 400, "Name the version"),
    ("post", "/api/reviews/{week}/publish", {"version": 9}, 404, "no version 9"),
])
def test_the_api_refuses_bad_review_input(app, api_client, seeded_week, method, path, body, status, message):
    week = seeded_week["week"].isoformat()
    with app.app_context():
        weekly_review.draft(seeded_week["week"], "owner")
    answer = getattr(api_client(), method)(path.format(week=week), json=body)
    assert answer.status_code == status and message in answer.json["message"], answer.json
    with app.app_context():
        assert _count(WeeklyReviewVersion) == 1 and weekly_review.published(
            weekly_review.by_week(seeded_week["week"]).id) is None


def test_a_read_token_cannot_draft_or_classify(app, api_client):
    client = api_client("read")
    assert client.post("/api/reviews", json={}).status_code == 403
    assert client.post(f"/api/runs/{uuid.uuid4()}/classification", json={"classification": "useful"}).status_code == 403


# --- the agent ---------------------------------------------------------------------------------------

def test_with_a_key_the_agent_writes_the_next_version_and_suggests_classifications(
        app, fake_anthropic, worker, seeded_week):
    """Against the Anthropic fake: the agent reads the week, saves version 2 citing #N, and its
    classification suggestions apply except over the owner's own choice."""
    with app.app_context():
        planner = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "experiment-planner"))
        runs.classify(planner, "not_useful", "owner")
        provisioner = db.session.scalar(sa.select(AgentRun.id).where(AgentRun.agent == "pod-provisioner"))
        planner_id = planner.id
        db.session.commit()
    fake_anthropic.script(
        reply(tool_use("read_weekly_review", {})),
        reply(tool_use("write_weekly_review", {"body_md": f"# The week\n\nIt emerges (#{seeded_week['landed']})."}),
              tool_use("classify_runs", {"runs": [{"id": str(provisioner), "classification": "not_useful"},
                                                  {"id": str(planner_id), "classification": "useful"}]})),
        reply(text("Done.")))
    with app.app_context():
        review, created = weekly_review.draft(seeded_week["week"], "scheduler")
        review_id = review.id
    worker()
    with app.app_context():
        review = db.session.get(WeeklyReview, review_id)
        latest = weekly_review.latest(review)
        assert latest.version == 2 and latest.author_kind == "agent" and "It emerges" in latest.body_md
        assert db.session.get(AgentRun, provisioner).classification == "not_useful"
        assert db.session.get(AgentRun, provisioner).classification_by == "agent"
        assert db.session.get(AgentRun, planner_id).classification == "not_useful"  # the owner's stands
        agent_run = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == weekly_review.AGENT))
        assert agent_run.status == "completed" and agent_run.scope_kind == "weekly_review"
    first_request = fake_anthropic.requests[1].body["messages"][-1]["content"][0]["content"]
    assert "Misalignment emerges" in first_request


def test_the_drafted_hook_hears_a_new_review_once(app, seeded_week):
    heard = []

    def listen(review):
        heard.append(review.week_end)
    weekly_review.on_drafted(listen)
    try:
        with app.app_context():
            weekly_review.draft(seeded_week["week"], "owner")
            weekly_review.draft(seeded_week["week"], "owner")
    finally:
        weekly_review._DRAFTED_HOOKS.remove(listen)  # only ours: the email hook stays registered
    assert heard == [seeded_week["week"]]


# --- the demo ----------------------------------------------------------------------------------------

def test_the_demo_drafts_its_week_and_the_scripted_agent_writes_and_classifies(app, worker, monkeypatch):
    """`make demo`: the curated demo's week is drafted once, and the scripted weekly-review agent
    (scripts/demo_agents.py) saves version 2 from it and classifies the week's runs."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import demo_agents

    from services.pipeline import demo
    agents = demo_agents.DemoAgents().start()
    for key, value in {"ANTHROPIC_API_KEY": "demo-scripted-agents", "ANTHROPIC_BASE_URL": agents.url,
                       "SAGAN_AGENT_MODEL": demo_agents.MODEL}.items():
        monkeypatch.setitem(app.config, key, value)
    try:
        with app.app_context():
            demo.load_curated()
            review = demo.draft_weekly_review()
            assert demo.draft_weekly_review().id == review.id
            review_id = review.id
            first = weekly_review.latest(review).body_md
        worker()
        with app.app_context():
            review = db.session.get(WeeklyReview, review_id)
            latest = weekly_review.latest(review)
            assert latest.version == 2 and latest.author_kind == "agent"
            assert "scripted weekly-review agent" in latest.body_md
            assert re.findall(r"#\d+", latest.body_md) == re.findall(r"#\d+", first) != []
            classified = db.session.scalars(sa.select(AgentRun.classification_by)
                                            .where(AgentRun.agent != weekly_review.AGENT)).all()
            assert classified and set(classified) == {"agent"}
    finally:
        agents.stop()


def test_the_api_list_is_a_constant_number_of_queries(app, api_client, seeded_week):
    client = api_client("read")

    def listed_queries() -> int:
        with app.app_context():
            with counting_queries() as seen:
                answer = client.get("/api/reviews?limit=50")
        assert answer.status_code == 200
        return len(seen)

    with app.app_context():
        weekly_review.draft(seeded_week["week"], "owner")
    client.get("/api/reviews")  # the token's first use of the minute also stamps it
    one = listed_queries()
    with app.app_context():
        for back in range(1, 5):
            weekly_review.draft(seeded_week["week"] - timedelta(days=7 * back), "owner")
    assert listed_queries() == one
    assert len(client.get("/api/reviews").json["reviews"]) == 5


def test_weekly_reviews_work_on_sqlite(tmp_path):
    """On the embedded default (SQLite, migrated as `make run` does): draft through the API's
    job, classify a run, save, publish and read the mentor update through its link."""
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
        number = api.post("/api/experiments", json={"title": "Lite experiment"}).get_json()["experiment"]["number"]
        with app.app_context():
            run = _run(experiments.get_experiment(number).id, "analyzer", 0.4)
            db.session.commit()
            run_id, week = run.id, weekly_review.week_end_for(daily_log.today())
            review, created = weekly_review.draft(week, "owner")
            assert created and weekly_review.draft(week, "owner")[0].id == review.id
        assert api.post(f"/api/runs/{run_id}/classification", json={"classification": "useful"}).status_code == 200
        assert api.post(f"/api/reviews/{week}/versions", json={"bodyMd": f"Lite week (#{number}).\n\n## Spend\n\n$1",
                                                               "baseVersion": 1}).status_code == 201
        assert api.post(f"/api/reviews/{week}/publish", json={"version": 2}).status_code == 200
        with app.app_context():
            assert weekly_review.week_runs(weekly_review.by_week(week))[0]["classification"] == "useful"
            _link, token = shares.create_link(scope="weekly_review", weekly_review=weekly_review.by_week(week))
            db.session.commit()
        shown = app.test_client().get(f"/s/{token}").text
        assert f"Lite week (#{number})" in shown and "Spend" not in shown
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


def test_a_review_is_a_record_links_name_by_its_week(app, client, owner, seeded_week):
    """Does "review:<week>" name the review, a week without one say so, and Settings list its link?"""
    week = seeded_week["week"].isoformat()
    with app.app_context():
        review, _ = weekly_review.draft(seeded_week["week"], "owner")
        ref = links.parse_reference(f"review:{week}")
        assert (ref.kind, ref.id, ref.url) == ("weekly_review", review.id, f"/reviews/{week}")
        with pytest.raises(NotFound, match="No weekly review for the week ending 2001-01-07"):
            links.parse_reference("review:2001-01-07")
        shares.create_link(scope="weekly_review", weekly_review=review, label="For Ada")
        db.session.commit()
        review_id = review.id
    settings_page = client.get("/settings").text
    assert f'<a href="/reviews/{review_id}">Weekly review</a>' in settings_page
    assert client.get(f"/reviews/{review_id}").status_code == 200


def test_the_owner_classifies_the_weeks_runs_on_the_review(app, client, owner, seeded_week):
    week = seeded_week["week"].isoformat()
    with app.app_context():
        weekly_review.draft(seeded_week["week"], "owner")
        run_id = db.session.scalar(sa.select(AgentRun.id).where(AgentRun.agent == "pod-provisioner"))
    page = client.get(f"/reviews/{week}")
    assert f'action="/reviews/{week}/runs/{run_id}/classification"' in page.text
    bad = client.post(f"/reviews/{week}/runs/{run_id}/classification",
                      data={"csrf_token": csrf_from(page.text), "classification": "meh"})
    assert bad.status_code == 422 and "classification is one of" in bad.text
    done = client.post(f"/reviews/{week}/runs/{run_id}/classification",
                       data={"csrf_token": csrf_from(page.text), "classification": "not_useful"})
    assert done.status_code == 303 and done.headers["Location"].endswith(f"/reviews/{week}#runs")
    assert client.post(f"/reviews/{week}/runs/{uuid.uuid4()}/classification",
                       data={"csrf_token": csrf_from(page.text), "classification": "useful"}).status_code == 404
    with app.app_context():
        run = db.session.get(AgentRun, run_id)
        assert (run.classification, run.classification_by) == ("not_useful", "owner")


# --- the runs list by classification -----------------------------------------------------------

def _listed_agents(html: str) -> set[str]:
    table = html.split('id="runs-table"', 1)[1]
    return {agent for agent in ("analyzer", "experiment-planner", "pod-provisioner", "clean-result-critic")
            if f'<td class="hide-narrow">{agent}</td>' in table}


def test_the_runs_list_shows_and_filters_by_classification(app, client, owner, seeded_week):
    """Does /runs show each run's classification and list only one classification's runs on ask?"""
    everything = client.get("/runs")
    assert everything.status_code == 200 and 'name="classification"' in everything.text
    assert _listed_agents(everything.text) == {"analyzer", "experiment-planner", "pod-provisioner",
                                               "clean-result-critic"}
    assert 'data-classification="not_useful">not useful' in everything.text
    for value, agents in (("useful", {"analyzer"}), ("not_useful", {"experiment-planner"}),
                          ("pending", {"pod-provisioner"}), ("archived", {"clean-result-critic"})):
        page = client.get(f"/runs?classification={value}")
        assert page.status_code == 200 and _listed_agents(page.text) == agents, value
        assert f'<option value="{value}" selected>' in page.text
    swap = client.get("/runs?classification=useful", headers={"HX-Request": "true"})
    assert swap.status_code == 200 and _listed_agents(swap.text) == {"analyzer"}


@pytest.mark.parametrize("value", ["great", "USEFUL", "x" * 300, "useful'--"])
def test_the_runs_list_refuses_an_unknown_classification(client, owner, seeded_week, value):
    page = client.get("/runs", query_string={"classification": value})
    assert page.status_code == 400
    assert "Filter runs by a classification among: pending, useful, not_useful, archived." in page.text


def test_the_api_lists_runs_by_classification(app, api_client, seeded_week):
    client = api_client("read")
    useful = client.get("/api/runs?classification=useful")
    assert useful.status_code == 200
    assert [(r["agent"], r["classification"]) for r in useful.json["runs"]] == [("analyzer", "useful")]
    pending = client.get("/api/runs?classification=pending").json["runs"]
    assert [r["agent"] for r in pending] == ["pod-provisioner"]
    assert len(client.get("/api/runs").json["runs"]) == 4
    bad = client.get("/api/runs?classification=great")
    assert bad.status_code == 400 and bad.json["field"] == "classification"
    assert "pending, useful, not_useful, archived" in bad.json["message"]
