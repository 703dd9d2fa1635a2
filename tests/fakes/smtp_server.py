"""A real SMTP server on loopback (aiosmtpd) that keeps what it is sent, and can be told to
fail the way real servers do. What those failures look like (RFC 5321 §4.2 and §4.5.3.2,
and how Postfix and hosted relays behave):

- a permanent refusal: a 5xx reply — `550 5.7.1 Message rejected` to DATA (policy, spam),
  `550 5.1.1` to RCPT (no such mailbox), `535 5.7.8` to AUTH (bad credentials);
- a temporary refusal: a 4xx reply — `451 4.3.0 Try again later` (greylisting, a full
  queue), `421` and a closed connection when the server is shutting down or overloaded;
- a timeout: the server accepts the connection and then says nothing (a firewall that
  swallows packets, an overloaded relay); RFC 5321 gives clients minutes per reply, so a
  client must set its own limit;
- a dropped connection: the TCP connection closes mid-dialogue, with no reply at all.

`script` takes one mode per message, in order (then `accept` again): `accept`, `refuse`
(550 to DATA), `defer` (451 to DATA), `timeout` (no reply to DATA for `hold_seconds`),
`drop` (close the connection at DATA). With `user`/`password`, AUTH is required (allowed
without TLS, on loopback only) and a wrong pair gets 535. With `security` "starttls" (the
server offers STARTTLS and refuses mail before it) or "tls" (TLS from the first byte), it
presents `cert_file`/`key_file` (tests/integration/test_email_notifications.py makes a
self-signed certificate for 127.0.0.1).
"""
from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

MODES = ("accept", "refuse", "defer", "timeout", "drop")


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage

    def part(self, subtype: str) -> str:
        """The text of the plain or html alternative."""
        return self.message.get_body(preferencelist=(subtype,)).get_content()


@dataclass
class FakeSmtp:
    user: str | None = None
    password: str | None = None
    hold_seconds: float = 3.0
    received: list[Received] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    attempts: int = 0  # DATA commands seen, whatever the answer
    auth_failures: list[bytes] = field(default_factory=list)  # what a refused AUTH carried
    security: str = "none"
    cert_file: str | None = None
    key_file: str | None = None

    def script(self, *modes: str) -> None:
        assert all(mode in MODES for mode in modes), modes
        self.modes.extend(modes)

    # --- aiosmtpd handler hooks -----------------------------------------------------
    async def handle_DATA(self, server, session, envelope):
        self.attempts += 1
        mode = self.modes.pop(0) if self.modes else "accept"
        if mode == "refuse":
            return "550 5.7.1 Message rejected by policy"
        if mode == "defer":
            return "451 4.3.0 Try again later"
        if mode == "timeout":
            await asyncio.sleep(self.hold_seconds)
            return "451 4.4.2 Timed out"
        if mode == "drop":
            server.transport.close()
            return "421 4.4.2 Closing"  # never reaches the client: the connection is gone
        message = message_from_bytes(envelope.original_content, policy=policy.default)
        self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 2.0.0 OK queued"

    def authenticate(self, server, session, envelope, mechanism, auth_data):
        if isinstance(auth_data, LoginPassword) and auth_data.login.decode() == self.user \
                and auth_data.password.decode() == self.password:
            return AuthResult(success=True)
        self.auth_failures.append(bytes(getattr(auth_data, "password", b"")))
        return AuthResult(success=False, handled=False, message="535 5.7.8 Authentication credentials invalid")

    # --- lifetime -------------------------------------------------------------------
    def __enter__(self) -> "FakeSmtp":
        with socket.socket() as probe:  # aiosmtpd's controller needs a fixed port: take a free one
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        options = {}
        if self.user:
            options = {"authenticator": self.authenticate, "auth_required": True, "auth_require_tls": False}
        if self.security != "none":
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.security == "tls":
                options["ssl_context"] = context
            else:
                options.update(tls_context=context, require_starttls=True)
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port, **options)
        self._controller.start()
        self.host = "127.0.0.1"
        return self

    def __exit__(self, *exc) -> None:
        self._controller.stop()
