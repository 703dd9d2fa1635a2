"""Integration fixtures: a live HTTP server for clients that speak real HTTP (the CLI), and
a way to see the worker's fork wait for the scheduler."""
from __future__ import annotations

import logging
import threading

import pytest
from werkzeug.serving import make_server

from models import db
from services import experiments, lifecycle
from services.actors import Actor
from workers import fork_guard


@pytest.fixture
def live_server(app):
    """The app served over real HTTP on a free loopback port for the test's duration."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_port}"
    yield server
    server.shutdown()
    thread.join(timeout=5)


@pytest.fixture
def fork_wait_seen():
    """An event set when the worker's fork guard logs that a fork waits for a scheduler tick."""
    seen = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record):
            if "fork waits" in record.getMessage():
                seen.set()

    handler = Watch()
    guard_log = logging.getLogger(fork_guard.__name__)
    guard_log.addHandler(handler)
    guard_log.setLevel(logging.INFO)
    yield seen
    guard_log.removeHandler(handler)
    guard_log.setLevel(logging.NOTSET)


@pytest.fixture
def make_planless_pending(app, make_experiment):
    """Factory: a card at plan_pending with no plan and no approval request (as the old demo
    data had), forced there by an override; returns its number."""
    def make(title: str = "Planless") -> int:
        number = make_experiment(title, status="planning")
        with app.app_context():
            lifecycle.transition(experiments.get_experiment(number), "plan_pending", Actor("owner"),
                                 note="Forced for the test.", override=True)
            db.session.commit()
        return number
    return make
