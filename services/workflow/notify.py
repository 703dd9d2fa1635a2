"""Owner notifications (SPEC §8.7): a webhook post when an experiment enters an owner-turn
status. Delivery runs as a job with retries, after the transition committed, so a slow or
broken webhook never blocks or undoes a move.
"""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpx
from flask import current_app
from rq import Retry

from models import Experiment, db
from services.core import registry, settings
from services.core.outbound import resolve_allowed
from services.workflow import jobs

TIMEOUT_SECONDS = 10


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
    jobs.put(jobs.DEFAULT, "workers.notify.deliver", (str(experiment_id),), retry=Retry(max=3, interval=[10, 60, 300]))


def deliver(experiment_id) -> int:
    """POST the payload; raises on failure so the job retries. Returns the HTTP status."""
    url = settings.get("webhook_url")
    experiment = db.session.get(Experiment, experiment_id)
    if not url or experiment is None or experiment.status not in registry.OWNER_TURN_STATUSES:
        return 0  # unset since, or the owner already acted
    response = post_pinned(url, webhook_payload(experiment))
    response.raise_for_status()
    return response.status_code


def post_pinned(url: str, body: dict) -> httpx.Response:
    """POST `body` as JSON to `url`, connecting only to an address checked just now.

    The host was checked when the owner saved the URL, but DNS can answer differently
    later (rebinding: public at save, 127.0.0.1 or 169.254.169.254 at delivery). So the
    name is resolved once here, that address checked, and the connection made to that
    address — the Host header and TLS (SNI and certificate) still name the host. No
    environment proxy and no redirects: either would connect somewhere not checked.
    """
    parts = urlsplit(url)
    address = resolve_allowed(parts.hostname)[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = literal + (f":{parts.port}" if parts.port else "")
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    host_header = parts.hostname + (f":{parts.port}" if parts.port else "")
    with httpx.Client(trust_env=False, follow_redirects=False, timeout=TIMEOUT_SECONDS) as client:
        request = client.build_request("POST", pinned, json=body, headers={"Host": host_header},
                                       extensions={"sni_hostname": parts.hostname})
        return client.send(request)


def on_notify_owner(experiment_id, actor, metadata) -> None:
    try:
        enqueue(experiment_id)
    except Exception:  # noqa: BLE001 - a notification must never break the move that caused it
        current_app.logger.exception("could not queue the owner notification")
