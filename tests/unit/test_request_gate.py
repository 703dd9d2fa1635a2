"""front/gate.py: request bodies are read under a per-client and a per-process limit, and
never while holding one of the slots that run the app's code."""
from __future__ import annotations

import io
import threading
import time

import pytest

from front import gate


class TrickleInput:
    """A wsgi.input whose bytes arrive only when the test releases them (a slow client)."""

    def __init__(self, data: bytes):
        self.data = io.BytesIO(data)
        self.arrived = threading.Event()
        self.reading = threading.Event()

    def read(self, size=None):
        self.reading.set()
        self.arrived.wait(10)
        return self.data.read(size)


def _environ(body, length, client="198.51.100.7"):
    return {"wsgi.input": body, "CONTENT_LENGTH": str(length), "REMOTE_ADDR": client, "REQUEST_METHOD": "POST"}


def test_a_client_gets_its_share_of_readers_and_no_more():
    readers = gate.BodyReaders(total=3, per_client=2)
    assert readers.acquire("a", wait=0) and readers.acquire("a", wait=0)
    assert not readers.acquire("a", wait=0.05)  # its share is taken
    assert readers.acquire("b", wait=0)  # another client is not held up by it
    assert not readers.acquire("c", wait=0.05)  # all three taken
    readers.release("a")
    assert readers.acquire("c", wait=0) and readers.reading() == 3


def test_a_released_reader_wakes_a_waiting_one():
    readers = gate.BodyReaders(total=1, per_client=1)
    assert readers.acquire("a", wait=0)
    threading.Timer(0.1, readers.release, args=("a",)).start()
    started = time.monotonic()
    assert readers.acquire("b", wait=5)
    assert time.monotonic() - started < 2


def test_a_request_waiting_for_its_body_holds_no_app_slot():
    """With one app slot, can a second request run the app while the first waits for bytes
    of its body, and does the first still get its whole body afterwards?"""
    seen = {}

    def app(environ, start_response):
        seen[environ["REMOTE_ADDR"]] = environ["wsgi.input"].read()
        start_response("200 OK", [])
        return [b"ok"]

    layer = gate.RequestGate(app, readers=gate.BodyReaders(4, 2), app_slots=1)
    slow = TrickleInput(b"x" * 100)
    first = threading.Thread(target=layer, args=(_environ(slow, 100, "192.0.2.1"), lambda *a: None))
    first.start()
    assert slow.reading.wait(5)
    done = threading.Event()
    second = threading.Thread(target=lambda: (layer(_environ(io.BytesIO(b"hi"), 2, "192.0.2.2"), lambda *a: None),
                                              done.set()))
    second.start()
    assert done.wait(5), "the second request waited for the first one's body"
    slow.arrived.set()
    first.join(5)
    assert seen == {"192.0.2.2": b"hi", "192.0.2.1": b"x" * 100}
    assert layer.readers.reading() == 0


def test_a_read_never_waits_for_more_than_was_declared():
    stream = io.BytesIO(b"abcdefgh")
    body = gate.GatedInput(stream, gate.BodyReaders(1, 1), gate._NoSlots(), "c", length=3)
    assert body.read() == b"abc" and body.read(10) == b""
    assert stream.tell() == 3


def test_a_refused_read_outside_flask_answers_503_in_json(monkeypatch):
    monkeypatch.setattr(gate, "BODY_READER_WAIT", 0.05)
    readers = gate.BodyReaders(1, 1)
    assert readers.acquire("203.0.113.9", wait=0)

    def reads_first(environ, start_response):  # like the lean ingest layer, in front of Flask
        environ["wsgi.input"].read()
        raise AssertionError("not reached")

    answered = {}
    layer = gate.RequestGate(reads_first, readers=readers)
    body = b"".join(layer(_environ(io.BytesIO(b"{}"), 2, "203.0.113.9"),
                          lambda status, headers: answered.update(status=status, headers=dict(headers))))
    assert answered["status"].startswith("503") and answered["headers"]["Retry-After"]
    assert b'"error": "unavailable"' in body


@pytest.mark.parametrize(("readers", "per_client"), [(0, 4), (4, 0)])
def test_settings_below_one_are_refused(readers, per_client):
    assert "at least 1" in gate.settings_problem(readers, per_client)
