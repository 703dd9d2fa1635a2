"""Owner notifications: a Slack-compatible webhook post on entering an owner turn."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from models import db
from services.core import settings
from services.core.actors import Actor
from services.workflow import experiments, lifecycle


@pytest.fixture
def receiver():
    """A loopback webhook receiver; `statuses` scripts its answers (default 200)."""
    received, statuses = [], []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append(json.loads(body))
            self.send_response(statuses.pop(0) if statuses else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.received, server.statuses = received, statuses
    server.url = f"http://127.0.0.1:{server.server_port}/hook"
    yield server
    server.shutdown()


def _set_webhook(app, url):
    with app.app_context():
        settings.put("webhook_url", url)
        db.session.commit()


def test_entering_owner_turn_posts_slack_body(app, receiver, worker, make_experiment):
    """Does a move into plan_pending post {text, experiment} with the turn and a link?"""
    _set_webhook(app, receiver.url)
    number = make_experiment("Needs you", status="planning")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        effects = lifecycle.transition(experiment, "plan_pending", Actor.system())
        db.session.commit()
        lifecycle.run_side_effects(effects)
    worker()
    assert len(receiver.received) == 1
    body = receiver.received[0]
    assert body["experiment"]["status"] == "plan_pending"
    assert body["experiment"]["turn"] == "Owner turn: approve, defer, or reject"
    assert f"#{number} Needs you" in body["text"] and body["experiment"]["url"].endswith(f"/experiments/{number}")


def test_sagan_turn_moves_do_not_notify(app, receiver, worker, make_experiment):
    """Is nothing posted for moves that are not the owner's turn?"""
    _set_webhook(app, receiver.url)
    number = make_experiment("Busy", status="proposed")
    with app.app_context():
        effects = lifecycle.transition(experiments.get_experiment(number), "clarifying", Actor("owner"))
        db.session.commit()
        lifecycle.run_side_effects(effects)
    worker()
    assert receiver.received == []


def test_failing_webhook_never_blocks_the_move_and_is_retried(app, receiver, worker, make_experiment):
    """A 500 from the webhook leaves the move committed and schedules a retry."""
    from rq.registry import ScheduledJobRegistry

    from services.core import redis_store
    from services.workflow import jobs
    _set_webhook(app, receiver.url)
    receiver.statuses.extend([500])
    number = make_experiment("Stuck", status="running")
    with app.app_context():
        effects = lifecycle.transition(experiments.get_experiment(number), "blocked", Actor.system(), note="pod died")
        db.session.commit()
        lifecycle.run_side_effects(effects)
    worker()
    with app.app_context():
        assert experiments.get_experiment(number).status == "blocked"
        scheduled = ScheduledJobRegistry(queue=jobs.queue(jobs.DEFAULT), connection=redis_store.connection())
        assert len(scheduled.get_job_ids()) == 1  # waiting for its retry
    assert len(receiver.received) == 1


def test_webhook_setting_validation(app, client, owner):
    """Are non-https and private webhook URLs refused with a message (private allowed only by setting)?"""
    app.config["SAGAN_ALLOW_PRIVATE_URLS"] = False
    try:
        for bad in ("http://hooks.example.com/x", "ftp://x", "https://127.0.0.1/hook", "https://"):
            page = client.post("/settings/webhook", data={"webhook_url": bad, "csrf_token": owner.csrf()})
            assert 'class="error"' in page.text, bad
        with app.app_context():
            assert settings.get("webhook_url") is None
    finally:
        app.config["SAGAN_ALLOW_PRIVATE_URLS"] = True
    ok = client.post("/settings/webhook", data={"webhook_url": "https://127.0.0.1/hook", "csrf_token": owner.csrf()})
    assert ok.status_code == 303
    client.post("/settings/webhook", data={"webhook_url": "", "csrf_token": owner.csrf()})
    with app.app_context():
        assert settings.get("webhook_url") is None
