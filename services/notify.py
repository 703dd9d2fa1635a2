"""Owner notifications (SPEC §8.7): a webhook post when an experiment enters an owner-turn
status. Delivery runs as a job with retries, after the transition committed, so a slow or
broken webhook never blocks or undoes a move.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import httpx
from flask import current_app

from models import Experiment, db
from services import registry, settings
from services.errors import ValidationError

TIMEOUT_SECONDS = 10


def check_outbound_url(url: str, *, schemes=("https",)) -> str:
    """A configured URL must be https (or the given schemes) and, unless allowed, public."""
    url = (url or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.hostname:
        raise ValidationError(f"The URL must start with {' or '.join(s + '://' for s in schemes)} and name a host.",
                              field="url")
    if current_app.config.get("SAGAN_ALLOW_PRIVATE_URLS"):
        return url
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(parts.hostname, None)}
    except socket.gaierror:
        raise ValidationError(f"The host {parts.hostname} does not resolve.", field="url") from None
    for address in addresses:
        ip = ipaddress.ip_address(address)
        if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_unspecified:
            raise ValidationError(f"{parts.hostname} resolves to a private or loopback address ({address}); "
                                  "set SAGAN_ALLOW_PRIVATE_URLS=1 to allow that.", field="url")
    return url


def webhook_payload(experiment: Experiment) -> dict:
    """A Slack-compatible body: `text` for Slack, and the details for anything else."""
    link = f"{current_app.config['SAGAN_BASE_URL'].rstrip('/')}/experiments/{experiment.number}"
    return {
        "text": f"#{experiment.number} {experiment.title} — {experiment.turn} <{link}|open>",
        "experiment": {"number": experiment.number, "title": experiment.title, "status": experiment.status,
                       "turn": experiment.turn, "url": link},
    }


def enqueue(experiment_id) -> None:
    """Queue the webhook post for an experiment that just entered an owner turn."""
    if not settings.get("webhook_url"):
        return
    from rq import Retry

    from services import jobs
    jobs.queue(jobs.DEFAULT).enqueue("workers.notify.deliver", args=(str(experiment_id),),
                                     retry=Retry(max=3, interval=[10, 60, 300]),
                                     failure_ttl=jobs.FAILURE_TTL, result_ttl=jobs.RESULT_TTL)


def deliver(experiment_id) -> int:
    """POST the payload; raises on failure so the job retries. Returns the HTTP status."""
    url = settings.get("webhook_url")
    experiment = db.session.get(Experiment, experiment_id)
    if not url or experiment is None or experiment.status not in registry.OWNER_TURN_STATUSES:
        return 0  # unset since, or the owner already acted
    response = httpx.post(url, json=webhook_payload(experiment), timeout=TIMEOUT_SECONDS)
    response.raise_for_status()
    return response.status_code


def on_notify_owner(experiment_id, actor, metadata) -> None:
    try:
        enqueue(experiment_id)
    except Exception:  # noqa: BLE001 - a notification must never break the move that caused it
        current_app.logger.exception("could not queue the owner notification")
