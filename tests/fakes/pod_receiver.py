"""A tiny loopback stand-in for Sagan's pod endpoints (`/api/progress`, `/api/artifacts`),
for running scripts/pod_bootstrap.sh for real without the app.

It records what a pod posts: `progress` (JSON bodies) and `artifacts` (name, content type,
bytes), each with the bearer token it came with. `fail_next(n, status, payload)` answers the
next n posts with that status and JSON body, to exercise the bootstrap's retries and what it
says about a refusal.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class PodReceiver:
    token: str = "spt_test_pod_token_0000000000"
    progress: list[dict] = field(default_factory=list)
    artifacts: list[dict] = field(default_factory=list)
    attempts: list[dict] = field(default_factory=list)  # every post, refused ones included

    def __post_init__(self):
        self._lock = threading.Lock()
        self._failures: list[int] = []
        self._server = None

    def fail_next(self, count: int = 1, status: int = 503, payload: dict | None = None,
                  path: str | None = None) -> None:
        """Answer the next `count` posts (to `path` only, if given) with `status` and `payload`
        (Sagan's error shape: `error`, `message` and its details, e.g. a 413's `budget`)."""
        with self._lock:
            self._failures.extend([(path, status, payload or {"error": "scripted failure"})] * count)

    def _failure_for(self, path: str) -> tuple[int, dict] | None:
        for index, (only, status, payload) in enumerate(self._failures):
            if only in (None, path):
                del self._failures[index]
                return status, payload
        return None

    def env(self) -> dict[str, str]:
        """The pod environment variables that point a bootstrap at this receiver."""
        return {"SAGAN_PROGRESS_URL": f"{self.url}/api/progress",
                "SAGAN_ARTIFACT_URL": f"{self.url}/api/artifacts",
                "SAGAN_POD_PROGRESS_TOKEN": self.token}

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "PodReceiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                record = {"path": self.path, "authorization": self.headers.get("Authorization"),
                          "content_type": self.headers.get("Content-Type"),
                          "name": self.headers.get("X-Sagan-Artifact-Name"), "body": raw}
                with receiver._lock:
                    receiver.attempts.append(record)
                    failure = receiver._failure_for(self.path)
                if failure:
                    return self._answer(*failure)
                if self.headers.get("Authorization") != f"Bearer {receiver.token}":
                    return self._answer(401, {"error": "unknown pod token"})
                with receiver._lock:
                    if self.path == "/api/progress":
                        try:
                            body = json.loads(raw)
                        except ValueError:
                            return self._answer(400, {"error": "invalid JSON"})
                        receiver.progress.append(body)
                    elif self.path == "/api/artifacts":
                        receiver.artifacts.append({"name": record["name"], "content_type": record["content_type"],
                                                   "body": raw})
                    else:
                        return self._answer(404, {"error": "no route"})
                return self._answer(200, {"ok": True, "id": str(len(receiver.attempts))})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
