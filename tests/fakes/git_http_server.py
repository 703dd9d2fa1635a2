"""A loopback git server over smart HTTP that wants a deploy token, like GitHub's.

`git http-backend` (git's own CGI program) serves the repositories under `root`; this
tiny server in front of it answers 401 with `WWW-Authenticate: Basic` unless the request
carries `Authorization: Basic base64(<any user>:<token>)` — GitHub accepts a token as the
password with any user name (`x-access-token` by convention). Every request is recorded,
with the URL exactly as sent, so a test can check the token never travelled in a URL.
"""
from __future__ import annotations

import base64
import os
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


@dataclass
class GitHttpServer:
    root: Path
    token: str
    requests: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self._server = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            _user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return password == self.token

    def __enter__(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                parsed = urllib.parse.urlsplit(self.path)
                ok = fake.authorized(self.headers.get("Authorization"))
                fake.requests.append({"method": self.command, "path": self.path, "authorized": ok})
                if not ok:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(fake.root),
                       "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": parsed.path,
                       "QUERY_STRING": parsed.query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                       "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "deploy", "REMOTE_ADDR": "127.0.0.1",
                       "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                       "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", "")}
                out = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True, timeout=60).stdout
                head, _, payload = out.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
