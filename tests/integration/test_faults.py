"""Faults and load at the edges (reliability issue): a pod's retries arriving twice and out
of order, two owner sessions acting on one card at once, and a run with 10,000 events.

The worker faults (killed mid-run and mid-dispatch, Redis flushed) are in
test_worker_faults.py; a PostgreSQL restart is in test_database_restart.py.
"""
from __future__ import annotations

import random
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, Pod, PodProgressPost, RunEvent, WorkflowEvent, db
from services.core.actors import Actor
from services.core.clock import utcnow
from services.planning import approvals
from services.workflow import experiments
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.queries import counting_queries
from tests.integration.test_approval_pages import PLANS

# --- progress: duplicates and out-of-order seq ---------------------------------------------

@pytest.mark.slow
def test_thousand_progress_posts_with_duplicates_out_of_order_are_each_stored_once(app, live_server, make_live_pod):
    """1,000 posts from 4 concurrent senders: 800 distinct seqs shuffled, 200 repeats of them.
    Each seq is stored once (post, timeline event, run event), every repeat answers
    `duplicate`, and the pod shows the newest seq's progress whatever arrived last."""
    live = make_live_pod("Ingest under retries")
    pod_id, run_id, secret = live.id, live.run_id, live.secret
    rng = random.Random(11)
    seqs = list(range(1, 801))
    posts = seqs + rng.sample(seqs, 200)
    rng.shuffle(posts)
    # The newest post is sent first: every older one must then leave the shown progress alone.
    posts.remove(800)
    posts.insert(0, 800)

    local = threading.local()

    def send(seq: int) -> dict:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=live_server.url, timeout=30)
            opened.append(local.client)
        answer = local.client.post("/api/progress", headers={"Authorization": f"Bearer {secret}"},
                                   json={"progressPct": seq / 8, "message": f"step {seq}", "seq": seq,
                                         "metrics": {"loss": 1 / seq}})
        assert answer.status_code == 200, answer.text
        return answer.json()

    opened: list[httpx.Client] = []
    try:
        first = send(posts[0])
        with ThreadPoolExecutor(max_workers=4) as pool:
            answers = [first] + list(pool.map(send, posts[1:]))
    finally:
        for client in opened:
            client.close()
    assert sum(1 for a in answers if a["duplicate"]) == 200
    assert sum(1 for a in answers if not a["duplicate"]) == 800
    with app.app_context():
        stored = db.session.scalars(sa.select(PodProgressPost.seq).where(PodProgressPost.pod_id == pod_id)).all()
        assert sorted(stored) == seqs
        assert db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)).where(
            WorkflowEvent.event_type == "progress")) == 800
        run_seqs = db.session.scalars(sa.select(RunEvent.seq).where(RunEvent.run_id == run_id)).all()
        assert sorted(run_seqs) == list(range(1, 801))  # one run event per stored post, seq unbroken
        assert db.session.get(AgentRun, run_id).last_seq == 800
        shown = db.session.get(Pod, pod_id)
        assert (shown.progress_pct, shown.progress_message, shown.progress_seq) == (100.0, "step 800", 800)


def test_an_older_post_arriving_late_updates_the_heartbeat_not_the_progress(app, client, make_live_pod):
    """seq 5 then a late seq 3: the pod still shows seq 5's progress, but was heard from."""
    from services.core import clock
    live = make_live_pod("Late post", tag="y")
    pod_id, secret = live.id, live.secret
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/progress", headers=headers, json={"progressPct": 50, "message": "five", "seq": 5}).status_code == 200
    clock.advance(timedelta(seconds=30))
    assert client.post("/api/progress", headers=headers, json={"progressPct": 30, "message": "three", "seq": 3}).status_code == 200
    with app.app_context():
        shown = db.session.get(Pod, pod_id)
        assert (shown.progress_pct, shown.progress_message, shown.progress_seq) == (50.0, "five", 5)
        assert shown.last_heartbeat_at >= utcnow() - timedelta(seconds=5)
    assert client.post("/api/progress", headers=headers, json={"progressPct": 60, "message": "no seq"}).status_code == 200
    with app.app_context():
        assert db.session.get(Pod, pod_id).progress_message == "no seq"  # a post without seq is news


# --- two owner sessions, one card --------------------------------------------------------

def _owner_session(base_url: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=base_url, timeout=30)
    page = client.get("/login")
    answer = client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                         "csrf_token": csrf_from(page.text)})
    assert answer.status_code == 302
    return client, csrf_from(client.get("/api-tokens").text)


@pytest.mark.slow
def test_two_owner_sessions_approving_and_moving_one_card_at_once(app, auth, live_server, make_experiment):
    """One tab approves the plan while another drags the card to archived, at the same
    instant: exactly one wins; the other's page says what happened instead of overwriting it."""
    auth.create_owner()
    approver, approver_csrf = _owner_session(live_server.url)
    mover, mover_csrf = _owner_session(live_server.url)
    winners = []
    try:
        for round_ in range(4):
            number = make_experiment(f"Contested {round_}", status="planning", pod_account="personal")
            with app.app_context():
                submission = approvals.submit_plan(experiments.get_experiment(number),
                                                   (PLANS / "two_pod_seed_sweep.md").read_text(),
                                                   Actor("token", "t", "cli"), source="api")
                db.session.commit()
                request_id = str(submission.approval.id)
            barrier = threading.Barrier(2)
            answers = {}

            def approve(request_id=request_id, barrier=barrier, answers=answers):
                barrier.wait()
                answers["approve"] = approver.post(f"/approvals/{request_id}/resolve", data={
                    "decision": "approve", "confirm_unchecked": "1", "csrf_token": approver_csrf})

            def move(number=number, barrier=barrier, answers=answers):
                barrier.wait()
                answers["move"] = mover.post(f"/board/move/{number}", data={
                    "to": "archived", "expected": "plan_pending", "note": "Not worth it.",
                    "csrf_token": mover_csrf}, headers={"HX-Request": "true"})

            threads = [threading.Thread(target=approve), threading.Thread(target=move)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            with app.app_context():
                experiment = experiments.get_experiment(number)
                approval = db.session.get(ApprovalRequest, uuid.UUID(request_id))
                status, approval_status = experiment.status, approval.status
                changes = db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)).where(
                    WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed",
                    WorkflowEvent.from_status == "plan_pending"))
            assert changes == 1, "exactly one of the two moved the card"
            if status == "approved":
                winners.append("approve")
                assert approval_status == "approved" and answers["approve"].status_code == 303
                board = answers["move"]
                assert board.status_code == 200
                card = re.search(rf'id="card-{number}".*?</article>', board.text, re.S).group(0)
                assert "approved" in card and ("while you were moving it" in card or "is now approved" in card)
            else:
                winners.append("move")
                assert status == "archived" and approval_status == "pending"
                refused = answers["approve"]
                assert refused.status_code == 303  # post/redirect/get: the approval page again, saying why
                page = approver.get(refused.headers["Location"])
                error = re.search(r'<p class="error" role="alert">(.*?)</p>', page.text, re.S)
                assert error and "archived" in error.group(1), page.text[-3000:]
    finally:
        approver.close()
        mover.close()
    assert len(winners) == 4


# --- a run with 10,000 events ----------------------------------------------------------------

def _seed_events(app, count: int) -> tuple[str, int]:
    with app.app_context():
        experiment = experiments.create_experiment({"title": "Long run"}, Actor("owner", None, "t"))
        run = AgentRun(id=uuid.uuid4(), kind="apply", agent="experiment-orchestrator", request="Go.",
                       scope_id=experiment.id, status="running", last_seq=count, heartbeat_at=utcnow())
        db.session.add(run)
        db.session.flush()
        start = utcnow() - timedelta(seconds=count)
        rows = [{"id": uuid.uuid4(), "run_id": run.id, "seq": seq,
                 "event_type": ("assistant_text", "tool_call", "tool_result")[seq % 3],
                 "body": f"step {seq} " * 20, "metadata_": {"tool": "read_file", "input": {"path": f"f{seq}.py"}},
                 "created_at": start + timedelta(seconds=seq), "updated_at": start + timedelta(seconds=seq)}
                for seq in range(1, count + 1)]
        for chunk in range(0, len(rows), 2000):
            db.session.execute(sa.insert(RunEvent), rows[chunk:chunk + 2000])
        db.session.commit()
        return str(run.id), count


def test_a_run_with_ten_thousand_events_keeps_its_page_and_poll_cheap(app, client, owner):
    """The page, the poll and "show earlier" run as many queries for 10,000 events as for 10,
    and answer well within a generous time bound."""
    small_id, _ = _seed_events(app, 10)
    run_id, last = _seed_events(app, 10_000)
    poll = {"HX-Request": "true"}

    def measure(url, headers=None, expect=200):
        with counting_queries() as statements:
            start = time.perf_counter()
            answer = client.get(url, headers=headers)
            elapsed = time.perf_counter() - start
        assert answer.status_code == expect, (url, answer.status_code)
        return len(statements), elapsed, answer

    small_queries, _, _ = measure(f"/runs/{small_id}")
    queries, elapsed, page = measure(f"/runs/{run_id}")
    assert queries == small_queries
    assert elapsed < 2.0
    assert page.text.count('<li class="run-event') == 200  # the latest 200, not 10,000
    assert f'data-seq="{last}"' in page.text and 'data-seq="1"' not in page.text

    idle_queries, idle_elapsed, idle = measure(f"/runs/{run_id}/events?after={last}", poll, expect=204)
    assert idle_queries <= 3 and idle_elapsed < 1.0 and idle.data == b""
    new_queries, _, new = measure(f"/runs/{run_id}/events?after={last - 300}", poll)
    assert new_queries <= 4 and f'data-seq="{last}"' in new.text and new.text.count('<li class="run-event') == 300
    earlier_queries, earlier_elapsed, earlier = measure(f"/runs/{run_id}/events?before={last // 2}", poll)
    assert earlier_queries <= 4 and earlier_elapsed < 2.0
    assert f'data-seq="{last // 2 - 1}"' in earlier.text and f'data-seq="{last // 2}"' not in earlier.text
    api_queries, _, api = measure(f"/api/runs/{run_id}?after={last - 1000}&limit=1000")
    assert api_queries <= 5 and len(api.get_json()["events"]) == 1000
