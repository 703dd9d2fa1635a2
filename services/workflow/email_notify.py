"""Email notifications to the owner (SPEC §12.5), beside the webhook (services/workflow/notify.py).

Four kinds: an owner turn (batched: at most one email per interval, listing everything that
still waits), a clean result ready, a failure or block, a weekly review drafted. What happens
is recorded first (`record`, a `Notification` row); `send_due` then groups what may go now
into emails — nothing during quiet hours (held, then sent together after), owner turns only
once the interval since the last such email has passed — and queues each email as an RQ job
that retries with back-off (`deliver`). After its last try an email is marked failed and
Settings lists it with the server's answer: never lost silently, and a slow server only
costs its own job (every SMTP read has a timeout).

Every email goes to the owner's address and nowhere else; it links to the page it is about,
and carries a signed one-click unsubscribe link for its kind (`unsubscribe_token`), also as
the List-Unsubscribe / List-Unsubscribe-Post headers (RFC 8058).
"""
from __future__ import annotations

import smtplib
import socket
import ssl
from datetime import timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import sqlalchemy as sa
from flask import current_app, render_template
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from rq import Retry, get_current_job

from models import Experiment, Notification, NotificationEmail, db
from services.core import members, registry
from services.core.clock import utcnow
from services.core.errors import ValidationError
from services.core.outbound import resolve_allowed
from services.core.sanitize import sanitize_html
from services.core.unlocked import outside_transaction
from services.workflow import email_settings, jobs

UNSUBSCRIBE_SALT = "sagan-email-unsubscribe"
# An unsubscribe link works this long after its email was sent (a year of old emails).
UNSUBSCRIBE_MAX_AGE_SECONDS = 366 * 24 * 3600
# A batch email lists this many items and counts the rest (the page has them all).
MAX_LISTED = 50
FAILED_SHOWN = 20
SUBJECTS = {"owner_turn": "Your turn: {count} waiting", "result_ready": "Result ready: {first}",
            "failure": "Failed or blocked: {first}", "weekly_review": "Weekly review drafted: {first}"}
SUBJECTS_MANY = {"result_ready": "{count} results ready", "failure": "{count} experiments failed or blocked",
                 "weekly_review": "{count} weekly reviews drafted"}


def base_url() -> str:
    return current_app.config["SAGAN_BASE_URL"].rstrip("/")


def experiment_url(number: int) -> str:
    return f"{base_url()}/experiments/{number}"


# --- recording what happened -------------------------------------------------------------

def record(kind: str, title: str, url: str, *, experiment_id=None) -> Notification | None:
    """Note something the owner should hear of, then send what is due. Nothing is kept when
    email is not set up or the owner turned this kind off. Commits."""
    if kind not in registry.NOTIFICATION_KINDS:
        raise ValueError(f"unknown notification kind {kind!r}")
    values = email_settings.current_values()
    if not email_settings.smtp(values).ready or not email_settings.kinds_enabled(values)[kind]:
        return None
    notification = Notification(kind=kind, title=title[:300], url=url[:500], experiment_id=experiment_id)
    db.session.add(notification)
    db.session.commit()
    send_due()
    return notification


def on_move(experiment_id, actor, metadata) -> None:
    """After a move commits (side effect `notify_owner` / `notify_failure`): an experiment
    that failed or is blocked, whose clean result waits to be promoted, or that entered
    another owner turn. Never breaks the move that caused it."""
    try:
        if not email_settings.smtp().ready:
            return  # one query per move while email is not set up
        experiment = db.session.get(Experiment, experiment_id)
        status = metadata.get("status")
        if experiment is None or status is None:
            return
        if status in ("failed", "blocked"):
            kind = "failure"
        elif status == "awaiting_promotion":
            kind = "result_ready"
        elif status in registry.OWNER_TURN_STATUSES:
            kind = "owner_turn"
        else:
            return
        record(kind, f"#{experiment.number} {experiment.title} — {experiment.turn}",
               experiment_url(experiment.number), experiment_id=experiment.id)
    except Exception:  # noqa: BLE001 - a notification must never break the move that caused it
        db.session.rollback()
        current_app.logger.exception("could not record the owner's email notification")


def notify_weekly_review_drafted(review_id, title: str, url: str) -> None:
    """For the weekly review's drafter: call after the draft is committed. `url` is the
    review's page (absolute, or a path under SAGAN_BASE_URL)."""
    try:
        record("weekly_review", title, url if "://" in url else base_url() + "/" + url.lstrip("/"))
    except Exception:  # noqa: BLE001 - a drafted review stands whatever the email does
        db.session.rollback()
        current_app.logger.exception("could not record the weekly review notification %s", review_id)


# --- grouping what is due into emails ----------------------------------------------------

def send_due(now=None) -> int:
    """Group the notifications that may go now into one email per kind and queue them; the
    number queued. Called after each `record` and on every scheduler tick (held ones go once
    quiet hours end or the owner-turn interval passes). Commits."""
    now = now or utcnow()
    if not email_settings.smtp().ready or email_settings.in_quiet_hours(now):
        return 0
    waiting = db.session.scalars(
        sa.select(Notification).where(Notification.email_id.is_(None))
        .order_by(Notification.created_at, Notification.id)
        .with_for_update(skip_locked=True)).all()  # two callers never put one notification in two emails
    if not waiting:
        db.session.rollback()
        return 0
    enabled = email_settings.kinds_enabled()
    still_waiting = _still_in_owner_turn({n.experiment_id for n in waiting if n.kind == "owner_turn"})
    by_kind: dict[str, list[Notification]] = {}
    for notification in waiting:
        stale = notification.kind == "owner_turn" and notification.experiment_id not in still_waiting
        if not enabled[notification.kind] or stale:
            db.session.delete(notification)  # turned off since, or the owner already acted
            continue
        by_kind.setdefault(notification.kind, []).append(notification)
    if "owner_turn" in by_kind and not _owner_turn_interval_passed(now):
        del by_kind["owner_turn"]
    emails = []
    for kind, items in by_kind.items():
        email = compose(kind, _one_per_page(items))
        db.session.add(email)
        db.session.flush()
        for notification in items:
            notification.email_id = email.id
        emails.append(email)
    db.session.commit()
    for email in emails:
        enqueue(email.id)
    return len(emails)


def _still_in_owner_turn(experiment_ids: set) -> set:
    experiment_ids.discard(None)
    if not experiment_ids:
        return set()
    return set(db.session.scalars(sa.select(Experiment.id).where(
        Experiment.id.in_(experiment_ids), Experiment.status.in_(registry.OWNER_TURN_STATUSES))))


def _owner_turn_interval_passed(now) -> bool:
    last = db.session.scalar(sa.select(sa.func.max(NotificationEmail.created_at))
                             .where(NotificationEmail.kind == "owner_turn"))
    return last is None or now - last >= timedelta(minutes=email_settings.owner_turn_interval_minutes())


def _one_per_page(items: list[Notification]) -> list[Notification]:
    """The latest notification of each page (an experiment that moved twice is listed once)."""
    latest: dict[str, Notification] = {}
    for notification in items:
        latest[notification.url] = notification
    return list(latest.values())


def compose(kind: str, items: list[Notification]) -> NotificationEmail:
    """The email for `items` of one kind: plain text and HTML, both with each item's link and
    the kind's unsubscribe link. Record text (titles) is escaped by the template and the HTML
    passes the project's one sanitizer."""
    listed = items[:MAX_LISTED]
    first = listed[0].title
    template = SUBJECTS_MANY[kind] if len(items) > 1 and kind in SUBJECTS_MANY else SUBJECTS[kind]
    subject = " ".join(template.format(count=len(items), first=first).split())[:200]  # one header line
    unsubscribe = unsubscribe_url(kind)
    context = {"kind": kind, "label": registry.NOTIFICATION_KIND_LABELS[kind], "items": listed,
               "more": len(items) - len(listed), "unsubscribe": unsubscribe, "settings_url": f"{base_url()}/settings#email",
               "home": base_url()}
    body_text = render_template("email/notification.txt", **context)
    body_html = sanitize_html(render_template("email/notification.html", **context))
    return NotificationEmail(kind=kind, subject=subject, body_text=body_text, body_html=body_html,
                             status="queued", attempts=0)


# --- delivery ----------------------------------------------------------------------------

def enqueue(email_id) -> None:
    """Queue an email's delivery; retried after each interval of EMAIL_RETRY_SECONDS."""
    intervals = current_app.config["EMAIL_RETRY_SECONDS"]
    jobs.put(jobs.DEFAULT, "workers.notify.send_email", (str(email_id),),
             retry=Retry(max=len(intervals), interval=intervals) if intervals else None)


class _PinnedSMTP(smtplib.SMTP):
    """Connects to an address checked just now (the outbound rule; DNS may answer otherwise
    than when the host was saved), while TLS still names and verifies the host."""

    def _get_socket(self, host, port, timeout):
        address = resolve_allowed(host, field="host")[0]
        return socket.create_connection((address, port), timeout, self.source_address)


class _PinnedSMTPSSL(smtplib.SMTP_SSL, _PinnedSMTP):
    pass


def message_of(email: NotificationEmail) -> EmailMessage:
    smtp = email_settings.smtp()
    message = EmailMessage()
    message["Subject"] = email.subject
    message["From"] = smtp.sender
    message["To"] = smtp.owner
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(idstring=email.id.hex, domain=smtp.sender.rsplit("@", 1)[-1])
    message["List-Unsubscribe"] = f"<{unsubscribe_url(email.kind)}>"
    message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(email.body_text)
    message.add_alternative(email.body_html, subtype="html")
    return message


def send(message: EmailMessage, invitee: str | None = None) -> None:
    """Hand one message to the SMTP server, for the owner's address only — or, for an
    invitation the owner has just made, for the one address it invites."""
    smtp = email_settings.smtp()
    if not smtp.ready:
        raise ValidationError("Email is no longer set up (Settings → Email).", field="smtp")
    # Settings checked the address; one set in the environment is checked here, so the
    # owner's one address is the only recipient whatever SAGAN_NOTIFY_EMAIL says.
    email_settings.check_address(smtp.owner, "owner", "owner's address (SAGAN_NOTIFY_EMAIL)")
    recipient = email_settings.check_address(invitee, "email", "invited address") if invitee else smtp.owner
    timeout = current_app.config["SMTP_TIMEOUT_SECONDS"]
    context = ssl.create_default_context()
    if smtp.security == "tls":
        connection = _PinnedSMTPSSL(smtp.host, smtp.port, timeout=timeout, context=context)
    else:
        connection = _PinnedSMTP(smtp.host, smtp.port, timeout=timeout)
    try:
        if smtp.security == "starttls":
            connection.starttls(context=context)
        if smtp.user:
            connection.login(smtp.user, smtp.password)
        connection.send_message(message, from_addr=smtp.sender, to_addrs=[recipient])
    finally:
        try:
            connection.quit()
        except (smtplib.SMTPException, OSError):
            connection.close()


def describe(exc: BaseException) -> str:
    """The failure as the owner reads it on Settings (scrubbed of the password)."""
    if isinstance(exc, smtplib.SMTPResponseException):
        reply = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        text = f"The SMTP server refused: {exc.smtp_code} {reply}"
    elif isinstance(exc, smtplib.SMTPRecipientsRefused):
        text = "The SMTP server refused the owner's address: " + "; ".join(
            f"{code} {reply.decode(errors='replace')}" for code, reply in exc.recipients.values())
    elif isinstance(exc, TimeoutError) or isinstance(exc.__context__, TimeoutError):
        # smtplib turns a read that timed out into SMTPServerDisconnected; the cause tells them apart.
        text = f"The SMTP server did not answer in time ({current_app.config['SMTP_TIMEOUT_SECONDS']} s)."
    elif isinstance(exc, smtplib.SMTPServerDisconnected):
        text = f"The SMTP server closed the connection: {exc}"
    elif isinstance(exc, ValidationError):
        text = exc.message
    elif isinstance(exc, ValueError):
        text = f"The message could not be written: {exc}"
    else:
        text = f"Could not reach the SMTP server: {exc.__class__.__name__}: {exc}"
    return email_settings.scrub(text)[:1000]


def deliver(email_id) -> str:
    """Send one queued email (the RQ job). On failure the error is kept and the job raises so
    RQ retries it; on the last try the email is marked failed (Settings lists it)."""
    email = db.session.get(NotificationEmail, email_id)
    if email is None or email.status != "queued":
        return "nothing to send"
    job = get_current_job()
    last_try = job is None or not job.retries_left
    email.attempts += 1
    try:
        send(message_of(email))
    except (smtplib.SMTPException, OSError, ValueError, ValidationError) as exc:
        email.last_error = describe(exc)
        if last_try:
            email.status = "failed"
        db.session.commit()
        current_app.logger.warning("email %s not sent (try %s): %s", email.id, email.attempts, email.last_error)
        raise EmailNotSent(email.last_error) from None  # the password-free text only, for RQ's record too
    email.status, email.sent_at, email.last_error = "sent", utcnow(), None
    db.session.commit()
    return "sent"


class EmailNotSent(Exception):
    """An SMTP failure, as scrubbed text (RQ stores the exception of a failed job)."""


def failed_emails() -> list[NotificationEmail]:
    """The emails that could not be sent after their last try, newest first (Settings)."""
    return list(db.session.scalars(sa.select(NotificationEmail).where(NotificationEmail.status == "failed")
                                   .order_by(NotificationEmail.created_at.desc()).limit(FAILED_SHOWN)))


def retry_failed(email_id) -> None:
    """Queue a failed email again, with a fresh set of retries (the owner fixed the server,
    say). Commits before queueing, so the job finds it queued."""
    email = db.session.get(NotificationEmail, email_id)
    if email is None or email.status != "failed":
        return  # sent or dismissed meanwhile: nothing to try
    email.status = "queued"
    db.session.commit()
    enqueue(email.id)


def dismiss_failed(email_id) -> None:
    """Forget a failed email once the owner has read it; the caller commits."""
    email = db.session.get(NotificationEmail, email_id)
    if email is not None and email.status == "failed":
        db.session.delete(email)


def send_test() -> str:
    """Send a test email now (not queued: the owner waits for the answer). The sentence to
    show: sent, or why not."""
    smtp = email_settings.smtp()
    if not smtp.ready:
        raise ValidationError("Save the SMTP server, the from address and your address first.", field="test")
    message = EmailMessage()
    message["Subject"] = "Sagan test email"
    message["From"], message["To"] = smtp.sender, smtp.owner
    message["Date"] = formatdate(localtime=False)
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(f"Sagan can send you email. Settings: {base_url()}/settings#email\n")
    try:
        send(message)
    except (smtplib.SMTPException, OSError, ValueError, ValidationError) as exc:
        raise ValidationError(f"Not sent. {describe(exc)}", field="test") from None
    return f"Sent a test email to {smtp.owner}."


# --- invitations -----------------------------------------------------------------------------

def send_invitation(invitation, link: str) -> bool:
    """Email a member's one-time link to the address the owner just invited (members.deliver's
    sender). Sent at once, not queued: the link is never stored (only its hash is), so there is
    nothing a retry could send again. False — not set up, or the server refused — and the owner
    copies the link from the page instead. Never anyone the owner did not name in that form."""
    if not email_settings.smtp().ready:
        return False
    smtp = email_settings.smtp()
    address, role = invitation.email, invitation.role
    message = EmailMessage()
    message["Subject"] = f"You are invited to Sagan as a {role}"
    message["From"], message["To"] = smtp.sender, address
    message["Date"] = formatdate(localtime=False)
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(f"You are invited to Sagan as a {role}. Set your password here (the link works once and "
                        f"expires in {members.INVITATION_LIFETIME.days} days):\n\n{link}\n\n"
                        "If you did not expect this, ignore this email.\n")
    try:
        # The SMTP conversation (up to SMTP_TIMEOUT_SECONDS) holds no transaction open.
        outside_transaction(send, message, address)
    except (smtplib.SMTPException, OSError, ValueError, ValidationError) as exc:
        current_app.logger.warning("invitation email to %s not sent: %s", address, describe(exc))
        return False
    return True


members.invitation_senders.append(send_invitation)


# --- one-click unsubscribe ----------------------------------------------------------------

def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.config["SECRET_KEY"], salt=UNSUBSCRIBE_SALT)


def unsubscribe_token(kind: str) -> str:
    return _serializer().dumps({"kind": kind})


def unsubscribe_url(kind: str) -> str:
    return f"{base_url()}/email/unsubscribe/{unsubscribe_token(kind)}"


def kind_of_token(token: str) -> str | None:
    """The kind a genuine, unexpired unsubscribe token names, else None."""
    try:
        data = _serializer().loads(token, max_age=UNSUBSCRIBE_MAX_AGE_SECONDS)
    except (SignatureExpired, BadSignature):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if kind in registry.NOTIFICATION_KINDS else None


def unsubscribe(token: str) -> str | None:
    """Turn off the one kind the token names; its kind, or None (changing nothing) for a
    tampered or expired token. Commits."""
    kind = kind_of_token(token)
    if kind is None:
        return None
    email_settings.set_kind(kind, False)
    db.session.commit()
    return kind
