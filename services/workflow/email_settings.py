"""The owner's email settings (SPEC §12.5): the SMTP server, the addresses, which kinds to
send, quiet hours and the owner-turn batching interval. Each value comes from Settings, else
from the environment (config.py, SAGAN_SMTP_*); the SMTP password is a secret — stored,
never shown back on a page, and scrubbed from every error Sagan keeps or logs.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime, time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from flask import current_app

from models import Setting, db
from services.core import registry, settings
from services.core.errors import ValidationError
from services.core.outbound import check_host

SECURITY_MODES = ("none", "starttls", "tls")
SECURITY_LABELS = {"none": "None (plain, port 25)", "starttls": "STARTTLS (port 587)", "tls": "TLS (port 465)"}
# One address, no display name: nothing else is ever a recipient, so nothing else is accepted.
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_CLOCK = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
MAX_INTERVAL_MINUTES = 24 * 60


@dataclass(frozen=True)
class Smtp:
    host: str
    port: int
    security: str
    user: str
    password: str
    sender: str
    owner: str

    @property
    def ready(self) -> bool:
        """Enough to send: a server, a sender and the owner's address."""
        return bool(self.host and self.sender and self.owner)


KEYS = ("smtp_host", "smtp_port", "smtp_security", "smtp_user", "smtp_password", "smtp_from", "notify_email",
        "email_kinds", "quiet_hours", "owner_turn_email_minutes")


def current_values() -> dict:
    """Every email setting in one query (a move's side effects ask on every move): the
    owner's value, else the configured default."""
    stored = {row.key: row.value for row in db.session.scalars(sa.select(Setting).where(Setting.key.in_(KEYS)))}
    return {key: stored[key] if key in stored else
            (current_app.config.get(settings.EDITABLE[key]) if settings.EDITABLE[key] else None) for key in KEYS}


def smtp(values: dict | None = None) -> Smtp:
    """The SMTP settings in force (Settings over the environment)."""
    values = values or current_values()
    return Smtp(host=values["smtp_host"] or "", port=int(values["smtp_port"] or 587),
                security=values["smtp_security"] or "starttls", user=values["smtp_user"] or "",
                password=values["smtp_password"] or "", sender=values["smtp_from"] or "",
                owner=values["notify_email"] or "")


def shown() -> dict:
    """What the settings page may show: everything but the password, of which only whether one is set."""
    values = current_values()
    current = smtp(values)
    return {"host": current.host, "port": current.port, "security": current.security, "user": current.user,
            "sender": current.sender, "owner": current.owner, "has_password": bool(current.password),
            "ready": current.ready, "kinds": kinds_enabled(values), "quiet": values["quiet_hours"] or None,
            "interval": int(values["owner_turn_email_minutes"] or 0)}


def check_address(value: str, field: str, what: str) -> str:
    value = (value or "").strip()
    if not _ADDRESS.fullmatch(value) or len(value) > 254:
        raise ValidationError(f"The {what} must be one email address, like owner@example.org.", field=field)
    return value


def update_smtp(form) -> None:
    """Check every field, then save them all (nothing is saved when one is wrong); an empty
    password keeps the saved one, `clear_password` forgets it. The caller commits."""
    host = (form.get("host") or "").strip()
    if not _HOST.fullmatch(host):
        raise ValidationError("Give the SMTP server's host name, like smtp.example.org.", field="host")
    try:
        port = int((form.get("port") or "").strip())
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ValidationError("The port is a number between 1 and 65535 (usually 587, 465 or 25).", field="port")
    security = form.get("security") or ""
    if security not in SECURITY_MODES:
        raise ValidationError("Choose the connection's security: none, STARTTLS or TLS.", field="security")
    user = (form.get("user") or "").strip()
    if len(user) > 200 or any(c in user for c in "\r\n"):
        raise ValidationError("The user name is one line of at most 200 characters.", field="user")
    password = form.get("password") or ""
    if len(password) > 500 or any(c in password for c in "\r\n"):
        raise ValidationError("The password is one line of at most 500 characters.", field="password")
    sender = check_address(form.get("sender"), "sender", "from address")
    owner = check_address(form.get("owner"), "owner", "owner's address")
    check_host(host.strip("[]"), field="host")  # the outbound rule: public hosts unless allowed
    for key, value in (("smtp_host", host), ("smtp_port", port), ("smtp_security", security),
                       ("smtp_user", user or None), ("smtp_from", sender), ("notify_email", owner)):
        settings.put(key, value)
    if form.get("clear_password") == "1":
        settings.put("smtp_password", None)
    elif password:
        settings.put("smtp_password", password)


# --- which kinds, when -------------------------------------------------------------------

def kinds_enabled(values: dict | None = None) -> dict[str, bool]:
    """Each kind on or off; every kind is on until the owner turns it off."""
    stored = (values["email_kinds"] if values else settings.get("email_kinds")) or {}
    return {kind: bool(stored.get(kind, True)) for kind in registry.NOTIFICATION_KINDS}


def enabled(kind: str) -> bool:
    return kinds_enabled()[kind]


def set_kind(kind: str, on: bool) -> None:
    """Turn one kind on or off, leaving the others as they are; the caller commits."""
    if kind not in registry.NOTIFICATION_KINDS:
        raise ValidationError("There is no such kind of notification.", field="kind")
    settings.put("email_kinds", {**kinds_enabled(), kind: on})


def quiet_hours() -> dict | None:
    """{"start": "22:00", "end": "07:00"} in the owner's time zone, or None."""
    return settings.get("quiet_hours") or None


def owner_turn_interval_minutes() -> int:
    return int(settings.get("owner_turn_email_minutes") or 0)


def update_preferences(form) -> None:
    """The kinds ticked, quiet hours (both times, or neither) and the owner-turn interval;
    nothing is saved when one is wrong. The caller commits."""
    start, end = (form.get("quiet_start") or "").strip(), (form.get("quiet_end") or "").strip()
    if bool(start) != bool(end):
        raise ValidationError("Give both the start and the end of the quiet hours, or neither.", field="quiet")
    for value in (start, end):
        if value and not _CLOCK.fullmatch(value):
            raise ValidationError("Quiet hours are times like 22:00 and 07:00.", field="quiet")
    if start and start == end:
        raise ValidationError("Quiet hours need a start and an end that differ.", field="quiet")
    try:
        interval = int((form.get("interval") or "").strip())
    except ValueError:
        interval = -1
    if not 0 <= interval <= MAX_INTERVAL_MINUTES:
        raise ValidationError(f"The owner-turn interval is 0 to {MAX_INTERVAL_MINUTES} minutes.", field="interval")
    settings.put("email_kinds", {kind: form.get(f"kind_{kind}") == "1" for kind in registry.NOTIFICATION_KINDS})
    settings.put("quiet_hours", {"start": start, "end": end} if start else None)
    settings.put("owner_turn_email_minutes", interval)


def owner_zone() -> ZoneInfo:
    """The owner's time zone (SAGAN_TIME_ZONE), read at each use: a change applies at once."""
    try:
        return ZoneInfo(current_app.config.get("SAGAN_TIME_ZONE") or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")  # start-up refuses a bad name (services/day/daily_log.py); never hold mail on it


def in_quiet_hours(now: datetime) -> bool:
    """Is `now` within the quiet hours, read on the owner's clock as it is now (so after a
    move to another zone, or a daylight-saving change, the same hours hold locally)?"""
    quiet = quiet_hours()
    if not quiet:
        return False
    local = now.astimezone(owner_zone()).time()
    start, end = (time.fromisoformat(quiet[k]) for k in ("start", "end"))
    if start < end:
        return start <= local < end
    return local >= start or local < end  # overnight, e.g. 22:00–07:00


def scrub(text: str) -> str:
    """An error as Sagan may keep or log it: the SMTP password, and its base64 forms
    (AUTH PLAIN/LOGIN carry it so), replaced."""
    current = smtp()
    password, user = current.password, current.user
    if not password:
        return text
    forms = {password, base64.b64encode(password.encode()).decode(),
             base64.b64encode(f"\0{user}\0{password}".encode()).decode()}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "[REDACTED]")
    return text
