"""A loopback fake of the Anthropic Messages API, speaking its real wire format.

Tests script what "Claude" answers, turn by turn; the app's real `anthropic` client
talks to it over HTTP through ANTHROPIC_BASE_URL. Each scripted turn is one of:

- a response body built with `reply(...)` (text and/or tool_use blocks, stop_reason, usage);
- `error(status, type, message)` — an API error body with that HTTP status;
- `slow(seconds, turn)` — wait before answering;
- a callable `fn(request_json) -> turn`, to answer from what was asked.

Every request is recorded (`fake.requests`) with its headers and JSON body.
"""
from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ids = itertools.count(1)


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict, id: str | None = None) -> dict:
    return {"type": "tool_use", "id": id or f"toolu_fake_{next(_ids):04d}", "name": name, "input": input}


def reply(*blocks: dict, stop_reason: str | None = None, input_tokens: int = 120,
          output_tokens: int = 40, model: str = "claude-fake") -> dict:
    """A Messages API response; stop_reason defaults to tool_use when a block calls a tool."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"_kind": "reply", "id": f"msg_fake_{next(_ids):04d}", "type": "message", "role": "assistant",
            "model": model, "content": list(blocks), "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def error(status: int, type: str, message: str, retry_after: float | None = None) -> dict:
    return {"_kind": "error", "status": status, "retry_after": retry_after,
            "body": {"type": "error", "error": {"type": type, "message": message}}}


def slow(seconds: float, turn: dict) -> dict:
    return {"_kind": "slow", "seconds": seconds, "turn": turn}


@dataclass
class RecordedRequest:
    path: str
    headers: dict
    body: dict


@dataclass
class FakeAnthropic:
    """The server; use as a context manager or call start()/stop()."""

    turns: deque = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    default: dict | None = None  # answered when the script runs out (None: a 500 saying so)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._server = None
        self._thread = None

    # --- scripting -------------------------------------------------------------------
    def script(self, *turns) -> "FakeAnthropic":
        with self._lock:
            self.turns.extend(turns)
        return self

    def remaining(self) -> int:
        with self._lock:
            return len(self.turns)

    def _next_turn(self, body: dict):
        with self._lock:
            turn = self.turns.popleft() if self.turns else self.default
        if callable(turn):
            turn = turn(body)
        return turn

    # --- serving ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeAnthropic":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", f"req_fake_{next(_ids):04d}")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self._send(400, {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "body is not JSON"}})
                fake.requests.append(RecordedRequest(self.path, dict(self.headers), body))
                if self.path.rstrip("/") != "/v1/messages":
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                                        "message": f"no route {self.path}"}})
                # Older SDKs send x-api-key; current ones a bearer Authorization header.
                if not (self.headers.get("x-api-key") or self.headers.get("Authorization", "").startswith("Bearer ")):
                    return self._send(401, {"type": "error", "error": {
                        "type": "authentication_error", "message": "an API key is required"}})
                turn = fake._next_turn(body)
                while turn and turn.get("_kind") == "slow":
                    time.sleep(turn["seconds"])
                    turn = turn["turn"]
                if turn is None:
                    return self._send(500, {"type": "error", "error": {
                        "type": "api_error", "message": "fake Anthropic: the test script ran out of turns"}})
                if turn["_kind"] == "error":
                    headers = {"retry-after": str(turn["retry_after"])} if turn["retry_after"] is not None else {}
                    return self._send(turn["status"], turn["body"], headers)
                payload = {k: v for k, v in turn.items() if not k.startswith("_")}
                payload["model"] = body.get("model", payload["model"])
                return self._send(200, payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
