"""The daily log (SPEC §12.3): a day's entry written from the record (moves, results, pods,
belief updates, literature, spend) in the owner's time zone, rewritten idempotently, written
by the scheduler once the day is over, shown at /log and /log/<day>, linked as "log:<day>",
and read through the API; bad days are refused with a sentence."""
from __future__ import annotations

import threading
import uuid
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from app import create_app
from config import TestConfig
from models import (BeliefVersion, CleanResultVersion, DailyLogEntry, LiteratureItem, Pod, WorkflowEvent,
                    db)
from services.core.actors import Actor
from services.core.clock import utcnow
from services.day import daily_log
from services.research import beliefs, links, literature
from services.results import results
from services.workflow import experiments, runs
from tests.integration.queries import counting_queries
from workers import scheduler

OWNER = Actor("owner", None, "Ada")
ZONE = "America/New_York"


@pytest.fixture
def owner_zone(app):
    """The owner lives in New York for this test (UTC-5 in December)."""
    before = app.config["SAGAN_TIME_ZONE"]
    app.config["SAGAN_TIME_ZONE"] = ZONE
    yield ZoneInfo(ZONE)
    app.config["SAGAN_TIME_ZONE"] = before


def _local(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=ZoneInfo(ZONE)).astimezone(timezone.utc)


def _count(model) -> int:
    return db.session.scalar(sa.select(sa.func.count()).select_from(model))


@pytest.fixture
def seeded_day(app, owner_zone, make_experiment):
    """A day, three days ago in New York, with two experiments moving, a clean result saved, a
    pod that failed and one that finished, an accepted belief update, an agent run, a paper,
    and an event at 23:30 local (that day) and one at 00:30 the next day."""
    moved = make_experiment("Insecure code, 3 seeds", status="running")
    landed = make_experiment("Secure baseline", status="running")
    late = make_experiment("Late night sweep")
    with app.app_context():
        day = daily_log.today() - timedelta(days=3)
        first, second, third = (experiments.get_experiment(n) for n in (moved, landed, late))
        # Moved back in time, each keeping its order (they were seconds apart).
        back = utcnow() - _local(day, 9)
        for event in db.session.scalars(sa.select(WorkflowEvent)):
            event.created_at -= back if event.experiment_id == first.id else back + timedelta(days=1)
        db.session.add(WorkflowEvent(entity_id=third.id, experiment_id=third.id, event_type="state_changed",
                                     from_status="proposed", to_status="planning", actor_kind="owner",
                                     created_at=_local(day, 23, 30)))
        db.session.add(WorkflowEvent(entity_id=third.id, experiment_id=third.id, event_type="state_changed",
                                     from_status="planning", to_status="plan_review", actor_kind="agent",
                                     created_at=_local(day + timedelta(days=1), 0, 30)))
        results.save_clean_result(second, "<p>It generalizes.</p>", OWNER, title="It generalizes (LOW confidence)")
        db.session.execute(sa.update(CleanResultVersion).values(created_at=_local(day, 11)))
        failed = Pod(id=uuid.uuid4(), experiment_id=first.id, account="team", name="pod-oom", status="running",
                     cost_per_hr=2.0, uptime_seconds=3 * 3600, gpu_type_id="NVIDIA H100 80GB HBM3",
                     last_started_at=_local(day, 9))
        finished = Pod(id=uuid.uuid4(), experiment_id=second.id, account="team", name="pod-done", status="running",
                       cost_per_hr=1.0, uptime_seconds=3600, last_started_at=_local(day, 12))
        db.session.add_all([failed, finished])
        db.session.flush()
        failed.status, failed.last_error = "failed", "CUDA out of memory"
        finished.status, finished.exit_code = "exited", 0
        db.session.flush()
        failed.ended_at, finished.ended_at = _local(day, 12), _local(day, 13)
        belief = beliefs.create_belief({"title": "Narrow finetuning generalizes"}, OWNER)
        proposal = beliefs.propose_update(belief, second, None, status="supported", confidence="MODERATE",
                                          text="It generalizes beyond code.", reasoning="#2 held on held-out tasks.")
        beliefs.accept_proposal(belief, proposal, OWNER)
        db.session.flush()
        db.session.execute(sa.update(BeliefVersion).where(BeliefVersion.version == 1)
                           .values(created_at=_local(day - timedelta(days=2), 10)))
        db.session.execute(sa.update(BeliefVersion).where(BeliefVersion.version == 2)
                           .values(created_at=_local(day, 14)))
        run = runs.create_run(kind="experiment", agent="analyzer", request="Analyse.", scope_id=first.id)
        run.cost_usd, run.started_at = 1.25, _local(day, 15)
        paper = literature.add({"title": "Emergent misalignment", "year": 2025, "authors": ["Betley, Jan"],
                                "arxiv_id": "2502.17424"}).item
        db.session.flush()
        db.session.execute(sa.update(LiteratureItem).values(created_at=_local(day, 16)))
        db.session.commit()
        return {"day": day, "moved": moved, "landed": landed, "late": late, "belief": belief.number,
                "paper": str(paper.id), "run": run.id}


def test_an_entry_is_written_from_the_days_record(app, seeded_day):
    """Does the day's entry count the moves, the clean result, the failed and finished pods, the
    accepted belief update, the paper and the spend (agents and GPU apart), each linking to its record?"""
    with app.app_context():
        entry = daily_log.write(seeded_day["day"], "owner")
        db.session.commit()
        summary = entry.summary
    assert summary["counts"] == {"results": 1, "moves": 2, "podsFinished": 1, "podsFailed": 1, "beliefUpdates": 1,
                                 "literature": 1}
    moves = {move["experimentNumber"]: move for move in summary["moves"]}
    assert moves[seeded_day["moved"]]["from"] == "proposed" and moves[seeded_day["moved"]]["to"] == "running"
    assert moves[seeded_day["moved"]]["url"] == f"/experiments/{seeded_day['moved']}"
    assert seeded_day["landed"] not in moves  # its moves were the day before
    assert summary["results"][0]["experimentNumber"] == seeded_day["landed"]
    assert summary["pods"]["failed"][0]["name"] == "pod-oom"
    assert summary["pods"]["failed"][0]["reason"] == "CUDA out of memory"
    assert summary["pods"]["finished"][0]["name"] == "pod-done"
    update = summary["beliefUpdates"][0]
    assert update["label"] == f"B{seeded_day['belief']}" and update["version"] == 2 and update["fromProposal"]
    assert update["url"] == f"/beliefs/{seeded_day['belief']}" and update["experimentNumber"] == seeded_day["landed"]
    assert summary["literature"][0]["url"] == f"/library/{seeded_day['paper']}"
    assert summary["spend"]["agentsUsd"] == 1.25 and summary["spend"]["agentRuns"] == 1
    assert summary["spend"]["gpuUsd"] == pytest.approx(2.0 * 3 + 1.0 * 1)
    assert summary["spend"]["totalUsd"] == pytest.approx(8.25)
    assert summary["timeZone"] == ZONE and not entry.partial
    assert f"[#{seeded_day['moved']}](/experiments/{seeded_day['moved']})" in entry.body_md
    assert "**Failed** pod-oom" in entry.body_md and "Total: $8.25" in entry.body_md


def test_an_event_at_2330_local_lands_on_that_day_and_0030_on_the_next(app, seeded_day):
    """In New York, is a move at 23:30 local (04:30 UTC the next day) on that day's entry, and one
    at 00:30 local on the next day's?"""
    with app.app_context():
        that_day = daily_log.gather(seeded_day["day"])
        next_day = daily_log.gather(seeded_day["day"] + timedelta(days=1))
    late = {move["experimentNumber"]: move for move in that_day["moves"]}[seeded_day["late"]]
    assert (late["from"], late["to"], late["steps"]) == ("proposed", "planning", 1)
    assert [(m["experimentNumber"], m["to"]) for m in next_day["moves"]] == [(seeded_day["late"], "plan_review")]
    assert that_day["from"] == _local(seeded_day["day"], 0).isoformat()


def test_rewriting_a_day_is_idempotent(app, seeded_day):
    """Does writing the same day twice keep one entry, with the same summary and markdown?"""
    with app.app_context():
        first = daily_log.write(seeded_day["day"], "owner")
        db.session.commit()
        entry_id, summary, body = first.id, dict(first.summary), first.body_md
        again = daily_log.write(seeded_day["day"], "owner")
        db.session.commit()
        assert again.id == entry_id and again.summary == summary and again.body_md == body
        assert _count(DailyLogEntry) == 1


def test_gathering_a_day_is_a_constant_number_of_queries(app, seeded_day, make_experiment):
    """Does a day with more experiments, events and pods take the same number of queries?"""
    with app.app_context():
        with counting_queries() as before:
            daily_log.gather(seeded_day["day"])
    for n in range(4):
        make_experiment(f"More {n}", status="running")
    with app.app_context():
        db.session.execute(sa.update(WorkflowEvent).values(created_at=_local(seeded_day["day"], 10)))
        db.session.commit()
        with counting_queries() as after:
            summary = daily_log.gather(seeded_day["day"])
    assert summary["counts"]["moves"] == 7
    assert len(after) == len(before) <= 10


def test_the_scheduler_writes_yesterday_once_the_day_has_ended(app, owner_zone, make_experiment):
    """Does a scheduler tick write yesterday's entry, a second tick leave it alone, and a
    partial entry written during yesterday get rewritten as a whole day?"""
    make_experiment("Moved yesterday", status="planning")
    with app.app_context():
        yesterday = daily_log.today() - timedelta(days=1)
        db.session.execute(sa.update(WorkflowEvent).values(created_at=_local(yesterday, 12)))
        partial = daily_log.write(yesterday, "owner", now=_local(yesterday, 11))
        assert partial.partial and partial.summary["counts"]["moves"] == 0
        db.session.commit()
        scheduler.tick(app)
        db.session.expire_all()
        entry = daily_log.get_entry(yesterday)
        assert not entry.partial and entry.written_by == "scheduler" and entry.summary["counts"]["moves"] == 1
        written_at = entry.written_at
        scheduler.tick(app)
        db.session.expire_all()
        assert daily_log.get_entry(yesterday).written_at == written_at
        assert _count(DailyLogEntry) == 1
        assert daily_log.get_entry(daily_log.today()) is None  # today is not over


def test_two_schedulers_racing_on_a_day_leave_one_entry(app, owner_zone):
    """When another scheduler inserts the day after our check and before our insert, is our
    write refused quietly (no error, no second row), leaving theirs?"""
    with app.app_context():
        yesterday = daily_log.today() - timedelta(days=1)
        now = utcnow()
    answer = {}

    def ours():
        with app.app_context():
            answer["entry"] = daily_log.write_due_days()
            db.session.remove()

    with app.app_context():
        with db.engine.connect() as theirs:
            theirs.execute(sa.insert(DailyLogEntry.__table__).values(
                id=uuid.uuid4(), day=yesterday, time_zone=ZONE, summary={"counts": {}}, body_md="theirs",
                partial=False, written_at=now, written_by="scheduler", created_at=now, updated_at=now))
            racer = threading.Thread(target=ours)
            racer.start()
            racer.join(0.5)  # ours saw no row and now waits on their uncommitted insert
            theirs.commit()
        racer.join(10)
        assert not racer.is_alive() and answer["entry"] == []
        assert _count(DailyLogEntry) == 1 and daily_log.get_entry(yesterday).body_md == "theirs"


def test_pages_show_the_empty_state_then_the_entry_with_links(app, client, owner, seeded_day):
    """Does /log say when the first entry comes, the write button make one, and the day page
    link each item to its record, with the days around it, a date picker and the links panel?"""
    page = client.get("/log")
    assert page.status_code == 200 and "the first entry is written after your first day" in page.text
    assert 'href="/log"' in page.text  # the nav
    day = seeded_day["day"].isoformat()
    empty = client.get(f"/log/{day}")
    assert empty.status_code == 200 and "No entry for this day" in empty.text
    written = client.post(f"/log/{day}/write", data={"csrf_token": owner.csrf()})
    assert written.status_code == 303 and written.headers["Location"].endswith(f"/log/{day}")
    text = client.get(f"/log/{day}").text
    for href in (f"/experiments/{seeded_day['moved']}", f"/experiments/{seeded_day['landed']}#clean-result",
                 f"/beliefs/{seeded_day['belief']}", f"/library/{seeded_day['paper']}",
                 f"/log/{(seeded_day['day'] - timedelta(days=1)).isoformat()}",
                 f"/log/{(seeded_day['day'] + timedelta(days=1)).isoformat()}"):
        assert f'href="{href}"' in text, href
    assert 'type="date"' in text and 'id="links"' in text and "CUDA out of memory" in text
    listing = client.get("/log").text
    assert f'href="/log/{day}"' in listing and "1 failed" in listing
    picked = client.get(f"/log?day={day}")
    assert picked.status_code == 303 and picked.headers["Location"].endswith(f"/log/{day}")


def test_today_has_no_next_day_and_writes_so_far(app, client, owner, owner_zone):
    """Is today's page without a next-day link, and "Write today so far" a partial entry?"""
    with app.app_context():
        today = daily_log.today().isoformat()
    text = client.get(f"/log/{today}").text
    assert "Write today so far" in text and 'rel="next"' not in text
    client.post(f"/log/{today}/write", data={"csrf_token": owner.csrf()})
    with app.app_context():
        assert daily_log.get_entry(date.fromisoformat(today)).partial
    assert "So far" in client.get(f"/log/{today}").text


def test_a_record_links_to_a_days_entry_by_log_reference(app, client, owner, seeded_day):
    """Does "log:<day>" name the entry, the link show on both pages, and a day without an entry say so?"""
    day = seeded_day["day"].isoformat()
    with app.app_context():
        entry = daily_log.write(seeded_day["day"], "owner")
        db.session.commit()
        belief = beliefs.get_belief(seeded_day["belief"])
        assert links.parse_reference(f"log:{day}").id == entry.id
        assert links.parse_reference(f"daily_log:{day}").id == entry.id
        belief_id, entry_id = belief.id, entry.id
    answer = client.post("/links", data={"csrf_token": owner.csrf(), "record_kind": "belief",
                                         "record_id": str(belief_id), "kind": "background",
                                         "target": f"log:{day}"})
    assert answer.status_code == 303
    assert f'href="/log/{day}"' in client.get(f"/beliefs/{seeded_day['belief']}").text
    assert f"/beliefs/{seeded_day['belief']}" in client.get(f"/log/{day}").text
    with app.app_context():
        assert links.panel("daily_log", entry_id).incoming
        with pytest.raises(Exception, match="No daily log entry 2001-01-01"):
            links.parse_reference("log:2001-01-01")


@pytest.mark.parametrize("bad, message", [("2026-13-45", "not a date on the calendar"),
                                          ("yesterday", "YYYY-MM-DD"), ("2999-01-01", "has not happened yet")])
def test_a_bad_or_future_day_is_a_404_with_a_sentence(app, client, owner, bad, message):
    """Is a day that is not one, or has not begun, a 404 page that says why, and writing it refused?"""
    page = client.get(f"/log/{bad}")
    assert page.status_code == 404 and message in page.text
    assert client.get(f"/log?day={bad}").status_code == 404
    refused = client.post(f"/log/{bad}/write", data={"csrf_token": owner.csrf()})
    assert refused.status_code == 404
    with app.app_context():
        assert _count(DailyLogEntry) == 0


def test_the_api_lists_reads_and_writes_entries(app, api_client, seeded_day):
    """Does the API write a day, list entries newest first, read one by ?day=, and answer camelCase?"""
    client = api_client()
    day = seeded_day["day"].isoformat()
    written = client.post("/api/daily-log", json={"day": day})
    assert written.status_code == 200, written.text
    assert written.json["entry"]["writtenBy"] == "token" and written.json["entry"]["summary"]["counts"]["moves"] == 2
    client.post("/api/daily-log", json={})  # today so far
    listed = client.get("/api/daily-log").json["entries"]
    assert [e["day"] for e in listed][1] == day and listed[0]["partial"] and "summary" not in listed[0]
    one = client.get(f"/api/daily-log?day={day}").json["entry"]
    assert one["day"] == day and one["bodyMd"].startswith(f"# {day}") and one["spend"]["totalUsd"] == 8.25


@pytest.mark.parametrize("query, status, message", [
    ("day=2026-02-30", 400, "not a date on the calendar"), ("day=", 400, "YYYY-MM-DD"),
    ("day=2999-01-01", 400, "has not happened yet"), ("day=2001-01-01", 404, "No daily log entry for 2001-01-01"),
    ("limit=0", 400, "limit must be"), ("offset=x", 400, "offset must be")])
def test_the_api_refuses_bad_days_with_a_message(app, api_client, query, status, message):
    """Does GET /api/daily-log answer a bad, future or unwritten day (and a bad page) with its status and sentence?"""
    answer = api_client("read").get(f"/api/daily-log?{query}")
    assert answer.status_code == status and message in answer.json["message"]


@pytest.mark.parametrize("body, message", [({"day": "soon"}, "YYYY-MM-DD"), ({"day": 20261201}, "YYYY-MM-DD"),
                                           ({"day": "2999-01-01"}, "has not happened yet"),
                                           ({"when": "2026-12-01"}, "Unknown field")])
def test_the_api_refuses_to_write_a_bad_day(app, api_client, body, message):
    """Is writing a bad or future day, or with an unknown field, a 400 that writes nothing?"""
    answer = api_client().post("/api/daily-log", json=body)
    assert answer.status_code == 400 and message in answer.json["message"]
    with app.app_context():
        assert _count(DailyLogEntry) == 0


def test_writing_needs_the_write_scope(app, api_client):
    """Is a read-only token refused when it asks to write a day?"""
    assert api_client("read").post("/api/daily-log", json={}).status_code == 403


def test_a_pod_up_across_midnight_is_split_between_days(app, owner_zone, make_experiment):
    """Is a pod up from 22:00 to 02:00 local counted two hours on each day, at its rate?"""
    number = make_experiment("Overnight")
    with app.app_context():
        day = daily_log.today() - timedelta(days=2)
        experiment = experiments.get_experiment(number)
        pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="team", name="pod-night", status="exited",
                  exit_code=0, cost_per_hr=3.0, uptime_seconds=4 * 3600, last_started_at=_local(day, 22))
        db.session.add(pod)
        db.session.flush()
        pod.ended_at = _local(day + timedelta(days=1), 2)
        db.session.commit()
        assert daily_log.gather(day)["spend"]["gpuUsd"] == pytest.approx(6.0)
        assert daily_log.gather(day + timedelta(days=1))["spend"]["gpuUsd"] == pytest.approx(6.0)


def test_a_misspelt_time_zone_stops_start_up():
    """Does an unknown SAGAN_TIME_ZONE stop the app from starting, naming the setting?"""
    class MisspeltZone(TestConfig):
        SAGAN_TIME_ZONE = "Europe/Berln"

    with pytest.raises(ValueError, match="SAGAN_TIME_ZONE is 'Europe/Berln', which is not a time zone"):
        create_app(MisspeltZone)


def test_the_scheduler_catches_up_on_days_missed_but_not_before_the_first_entry(app, owner_zone):
    """With the newest entry four days old (workers down), does one tick write the three days
    since, and with no entry at all only yesterday?"""
    with app.app_context():
        yesterday = daily_log.today() - timedelta(days=1)
        assert daily_log.days_due() == [yesterday]
        daily_log.write(yesterday - timedelta(days=3), "scheduler")
        db.session.commit()
        assert daily_log.days_due() == [yesterday - timedelta(days=2), yesterday - timedelta(days=1), yesterday]
        scheduler.tick(app)
        assert daily_log.days_due() == []
        assert _count(DailyLogEntry) == 4


def test_a_long_day_shows_the_first_items_and_counts_the_rest(app, owner_zone):
    """With more papers added than an entry lists, does it list LIST_LIMIT, count them all and say how many more?"""
    with app.app_context():
        for n in range(daily_log.LIST_LIMIT + 3):
            literature.add({"title": f"Paper number {n} on warmup", "authors": [f"Author {n}"]})
        db.session.commit()
        entry = daily_log.write(daily_log.today(), "owner")
    assert entry.summary["counts"]["literature"] == daily_log.LIST_LIMIT + 3
    assert len(entry.summary["literature"]) == daily_log.LIST_LIMIT
    assert "… and 3 more" in entry.body_md
