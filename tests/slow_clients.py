"""Clients that cost a server without asking much of it, over plain sockets: connections
left idle after a request (as a browser keeps up to six per host) and request bodies sent
in part and never finished. An HTTP library would finish what it starts, so these are
written by hand. Used by the tests of the web server as deployed and of `make run`.

Each connection can come from its own loopback address (127.0.0.2, 127.0.0.3…: Linux
answers the whole 127/8 on `lo`), so a test can tell an attacker's address from the
owner's, as the server's per-client limits do.
"""
from __future__ import annotations

import socket
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def connect(port: int, source: str = "127.0.0.1", timeout: float = 30) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    sock.settimeout(timeout)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length from `sock`: (status, headers, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection mid-body")
        body += chunk
    return int(lines[0].split()[1]), headers, body[:length]


def request_bytes(method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"",
                  declared: int | None = None) -> bytes:
    """The request's bytes; `declared` overrides the Content-Length (to promise more than is sent)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: sagan.test"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or declared is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {declared if declared is not None else len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def timed_request(port: int, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b"",
                  source: str = "127.0.0.1", timeout: float = 30) -> tuple[int, float, dict[str, str], bytes]:
    """One request on a new connection: (status, seconds from connect to the whole answer, headers, body)."""
    started = time.perf_counter()
    with connect(port, source, timeout) as sock:
        sock.sendall(request_bytes(method, path, headers, body))
        status, answer_headers, answer = read_response(sock)
    return status, time.perf_counter() - started, answer_headers, answer


class HeldConnections:
    """Connections kept open until the block ends."""

    def __init__(self, port: int):
        self.port = port
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> "HeldConnections":
        return self

    def __exit__(self, *exc) -> None:
        for sock in self.sockets:
            sock.close()

    def idle(self, count: int, path: str = "/login", source: str = "127.0.0.1") -> None:
        """`count` connections that each made one request, read the answer and stay open."""
        for _ in range(count):
            sock = connect(self.port, source)
            sock.sendall(request_bytes("GET", path))
            status, _headers, _body = read_response(sock)
            assert status == 200, f"GET {path} answered {status}"
            self.sockets.append(sock)

    def half_sent(self, count: int, method: str, path: str, *, headers: dict[str, str] | None = None,
                  declared: int = 15_000, sent: bytes = b"{", source: str = "127.0.0.2") -> list[socket.socket]:
        """`count` requests that declare `declared` bytes of body, send `sent` and stop there."""
        opened = []
        for _ in range(count):
            sock = connect(self.port, source)
            sock.sendall(request_bytes(method, path, headers, sent, declared=declared))
            opened.append(sock)
        self.sockets += opened
        return opened
