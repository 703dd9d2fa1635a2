"""Request bodies that never finish cannot take the server with them.

granian hands the app a request as soon as its headers are in and reads the body as the
app asks for it, on the request's own thread, with no time limit: a client that declares
`Content-Length: 15000` and sends one byte holds that thread for as long as it keeps the
connection open (granian declined to add a body timeout; a read from another thread,
which could be abandoned, wedges the worker). With the server's few threads, eight such
connections once stopped every request, `/healthz` included.

So a body is read only under two limits, and never while holding one of the slots that
run the app's code:

- **body readers**: at most `SAGAN_WEB_BODY_READERS` threads of a worker may wait for
  bytes of a body at once, and at most `SAGAN_WEB_BODY_READERS_PER_CLIENT` of them for one
  client address. A read that cannot get a reader within BODY_READER_WAIT seconds is
  refused with 503 before it touches the body (the server then closes the connection).
  The worker has threads beyond these (serve.py), so requests without a body — pages,
  polls, `/healthz` — always find one.
- **app slots**: when the web server sets `SAGAN_WEB_APP_SLOTS` (its threads per worker),
  only that many requests run the app's code at once, as before the body readers were
  added, so the extra threads never contend for the interpreter. A request gives its slot
  back while it waits for body bytes and takes one again when they are in.

Which address counts as the client is decided after the trusted-proxy fix, as for the
rate limits. The body is not read here: a refused token, a missing session or a wrong
content type is answered before any byte of it is waited for.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter

from werkzeug.exceptions import ServiceUnavailable

from front import headers

# How long a read waits for a free body reader before it is refused: long enough that a
# burst of ordinary posts from one address (pods behind one NAT, the local pods' relay)
# queues instead of failing, short enough that a slow client's extra connections are
# turned away promptly.
BODY_READER_WAIT = 2.0


class BodyRefused(ServiceUnavailable):
    """No body reader was free for this client in time. An HTTPException, so inside Flask
    the error handlers answer it like any other 503; outside Flask the gate does."""

    description = "The server is reading too many slow uploads right now; try again in a moment."

    def __init__(self) -> None:
        super().__init__(retry_after=round(BODY_READER_WAIT))


class BodyReaders:
    """Counts the threads of this process that wait for body bytes, in all and per client."""

    def __init__(self, total: int, per_client: int):
        self.total = total
        self.per_client = per_client
        self._changed = threading.Condition()
        self._reading = 0
        self._by_client: Counter[str] = Counter()

    def acquire(self, client: str, wait: float | None = None) -> bool:
        deadline = time.monotonic() + (BODY_READER_WAIT if wait is None else wait)
        with self._changed:
            while self._reading >= self.total or self._by_client[client] >= self.per_client:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            self._reading += 1
            self._by_client[client] += 1
            return True

    def release(self, client: str) -> None:
        with self._changed:
            self._reading -= 1
            self._by_client[client] -= 1
            if not self._by_client[client]:
                del self._by_client[client]
            self._changed.notify_all()

    def reading(self) -> int:
        with self._changed:
            return self._reading


class _NoSlots:
    """App slots when the server runs without a limit (tests, the CLI, the dev server)."""

    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass


class GatedInput:
    """`wsgi.input` read under a body reader and outside the request's app slot."""

    def __init__(self, raw, readers: BodyReaders, slots, client: str, length: int | None):
        self._raw = raw
        self._readers = readers
        self._slots = slots
        self._client = client
        self._left = length  # None: until the end of the stream (chunked)
        self._holding = False
        self._finished = length == 0

    def read(self, size: int | None = -1) -> bytes:
        if self._left is not None and (size is None or size < 0 or size > self._left):
            size = self._left  # never wait for bytes the request did not declare
        if size is None or size < 0:
            return self._through(self._raw.read)  # to the end of a chunked body
        return self._through(self._raw.read, size)

    def readline(self, size: int | None = -1) -> bytes:
        return self._through(self._raw.readline)

    def readlines(self, hint=None) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self):
        return iter(self.readline, b"")

    def _through(self, read, *args) -> bytes:
        if self._finished or args == (0,):
            return b""
        if not self._holding:
            if not self._readers.acquire(self._client):
                raise BodyRefused()
            self._holding = True
        self._slots.release()
        try:
            data = read(*args)
        finally:
            self._slots.acquire()
        if self._left is not None:
            self._left -= len(data)
        if not data or self._left == 0:
            self.finish()
        return data

    def finish(self) -> None:
        """The body is read (or the request is over): give the body reader back."""
        self._finished = True
        if self._holding:
            self._holding = False
            self._readers.release(self._client)


class RequestGate:
    """WSGI middleware (see the module docstring)."""

    def __init__(self, wsgi_app, *, readers: BodyReaders, app_slots: int = 0):
        self.wsgi_app = wsgi_app
        self.readers = readers
        self.slots = threading.BoundedSemaphore(app_slots) if app_slots > 0 else _NoSlots()

    @classmethod
    def from_config(cls, wsgi_app, config) -> "RequestGate":
        problem = settings_problem(config["WEB_BODY_READERS"], config["WEB_BODY_READERS_PER_CLIENT"])
        if problem:
            raise ValueError(problem)
        readers = BodyReaders(config["WEB_BODY_READERS"], config["WEB_BODY_READERS_PER_CLIENT"])
        return cls(wsgi_app, readers=readers, app_slots=config.get("WEB_APP_SLOTS") or 0)

    def __call__(self, environ, start_response):
        body = GatedInput(environ["wsgi.input"], self.readers, self.slots, environ.get("REMOTE_ADDR") or "unknown",
                          _declared_length(environ))
        environ["wsgi.input"] = body
        self.slots.acquire()
        try:
            return self.wsgi_app(environ, start_response)
        except BodyRefused as refused:
            # Raised outside Flask's handlers (a layer in front of Flask read the body).
            return _refusal(refused, start_response)
        finally:
            body.finish()
            self.slots.release()


def _refusal(refused: BodyRefused, start_response) -> list[bytes]:
    """The 503 for a read refused in front of Flask, in the API's JSON error shape."""
    body = json.dumps({"error": "unavailable", "message": refused.description}).encode()
    start_response("503 SERVICE UNAVAILABLE", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                               ("Retry-After", str(refused.retry_after)), ("X-Sagan-Error", "unavailable")])
    return [body]


def settings_problem(readers: int, per_client: int) -> str | None:
    """What is wrong with the body-reader settings, or None."""
    if readers < 1 or per_client < 1:
        return ("SAGAN_WEB_BODY_READERS and SAGAN_WEB_BODY_READERS_PER_CLIENT must be at least 1 "
                f"(got {readers} and {per_client}).")
    return None


def _declared_length(environ) -> int | None:
    """The declared Content-Length (0 when none), or None when the body runs to the end of the stream."""
    if headers.streamed_body(environ):
        return None
    return headers.content_length(environ) or 0
