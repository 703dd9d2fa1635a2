"""RQ entry point of the `artifacts` queue: processing one large upload (served by worker
processes of its own, so an agent job never waits behind it: workers/launcher.py)."""
from __future__ import annotations

from services.dispatch import artifacts


def process(artifact_id: str, digest: str) -> str:
    """Redact one upload and sanitize its figure; `failed` with the reason past the queue's timeout."""
    return artifacts.process(artifact_id, digest)
