"""A pod's log, wherever it is now: the provider while the pod exists —
RunPod's v2 logs stream, the local backend's output.log — and the `sagan-logs/<pod>.log`
artifact the bootstrap uploads (its last 1 MB, docs/pods.md) once the pod is gone.

One reader for the agents' `read_pod_logs` tool and the pod card's Logs view, so both
show the same text: redacted (the server's secrets and credential patterns) and capped.
RunPod's stream carries two sources, the container's output and the host's `system` lines
(image pulls, disk, GPU errors): a pod that never started its container has only the
latter, exactly what its failure needs, so both are read and each line says which it is.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from models import Artifact, Pod, db
from services.core import pod_accounts
from services.core.errors import ValidationError
from services.core.redact import redact
from services.dispatch.backends import BackendError, LogLine, backend_for

DEFAULT_TAIL = 200
MAX_TAIL = 5000          # RunPod's own maximum backfill
MAX_BYTES = 60_000       # what one read hands back (a model's tool result, a page)
ARTIFACT_PREFIX = "sagan-logs/"


@dataclass
class PodLog:
    pod: Pod
    source: str              # the account's log source (pod_accounts), "artifact" or "none"
    text: str
    lines: int
    truncated: bool = False
    note: str | None = None  # what the reader should know (since ignored, nothing found…)
    last_ts: str | None = None  # pass as `since` to read only what came after
    words: str | None = None    # where the provider's lines came from, as its account says it
    labelled: bool = False      # each line says its source: [container] or [system]

    @property
    def source_words(self) -> str:
        return self.words or _SOURCE_WORDS[self.source]

    def render(self) -> str:
        """The log with a header line saying where it came from, for a model to read."""
        head = f"Log of pod {self.pod.name} ({self.pod.status}) from {self.source_words}: {self.lines} line(s)"
        if self.labelled:
            head += ", [container] output and the host's [system] lines"
        if self.truncated:
            head += f", cut to the last {MAX_BYTES:,} bytes"
        if self.last_ts:
            head += f"; last line at {self.last_ts} (read on with since={self.last_ts})"
        parts = [head + "."]
        if self.note:
            parts.append(self.note)
        parts.append(self.text or "(empty)")
        return "\n".join(parts)


# Where a log came from when no provider had it; a provider's own words are its account's.
_SOURCE_WORDS = {"artifact": "the log the pod uploaded (its last 1 MB)", "none": "nowhere"}


def parse_since(since: str | None) -> str | None:
    """An RFC 3339 time, normalised to UTC `…Z`, or a ValidationError."""
    if since is None or not since.strip():
        return None
    text = since.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValidationError(f"since must be an RFC 3339 time such as 2026-12-01T09:30:00Z, not {since[:60]!r}.",
                              field="since") from None
    if moment.tzinfo is None:
        raise ValidationError("since needs a time zone (end it with Z for UTC).", field="since")
    return text


def parse_tail(tail) -> int:
    if tail is None:
        return DEFAULT_TAIL
    if isinstance(tail, bool) or not isinstance(tail, int) or not 1 <= tail <= MAX_TAIL:
        raise ValidationError(f"tail must be a whole number of lines from 1 to {MAX_TAIL}.", field="tail")
    return tail


def pod_of_experiment(experiment_id, name_or_id: str) -> Pod:
    """The experiment's pod by name (or id); another experiment's pod is "no such pod here"."""
    key = (name_or_id or "").strip()
    if not key:
        raise ValidationError("Name the pod (its name as list_pods shows it).", field="pod")
    condition = Pod.name == key
    try:
        condition = sa.or_(condition, Pod.id == uuid.UUID(key))
    except ValueError:
        pass
    pod = db.session.scalar(sa.select(Pod).where(Pod.experiment_id == experiment_id, condition).limit(1))
    if pod is None:
        names = db.session.scalars(sa.select(Pod.name).where(Pod.experiment_id == experiment_id)
                                   .order_by(Pod.created_at)).all()
        raise ValidationError(f"No pod {key[:200]!r} in this experiment. Its pods: {', '.join(names) or 'none'}.",
                              field="pod")
    return pod


def read_pod_logs(pod: Pod, *, tail: int | None = None, since: str | None = None) -> PodLog:
    """The pod's last `tail` lines, or (RunPod) those after `since`; redacted and capped."""
    tail = parse_tail(tail)
    since = parse_since(since)
    provider_note = None
    if pod.provider_pod_id and pod.status != "terminated":
        try:
            lines = backend_for(pod.account).logs(pod.provider_pod_id, tail=tail, since=since)
        except BackendError as exc:
            lines, provider_note = None, f"The provider's log could not be read ({exc.reason}: {exc.message})."
        account = pod_accounts.get(pod.account)
        if lines is not None and account is not None:
            note = None
            if since and not account.log_timed:
                note = (f"A {account.pod_label.lower()}'s log has no time per line, so since cannot narrow it: "
                        "this is the tail.")
            return _finish(pod, account.log_source, lines, note, words=account.log_words,
                           labelled=account.log_labelled)
    artifact = _log_artifact(pod)
    if artifact is not None and not artifact.readable:
        why = ("is still being redacted; read it again in a minute" if artifact.status == "processing"
               else f"could not be processed ({artifact.status_note or 'no reason recorded'})")
        return PodLog(pod, "none", "", 0, note=(provider_note + " " if provider_note else "")
                      + f"The log the pod uploaded {why}.")
    if artifact is not None:
        text = artifact.content.decode("utf-8", "replace")
        lines = [LogLine(line) for line in text.splitlines()[-tail:]]
        note = provider_note
        if since:
            note = ((note + " ") if note else "") + "The uploaded log has no time per line: this is its tail."
        return _finish(pod, "artifact", lines, note)
    return PodLog(pod, "none", "", 0, note=(provider_note or "") + (
        " " if provider_note else "") + "No log is available: the provider no longer has the pod and it "
        "uploaded no log (a pod that never started, or one that died before its bootstrap's upload).")


def _log_artifact(pod: Pod) -> Artifact | None:
    """The log the pod uploaded; a large one is readable only once a job has redacted it."""
    return db.session.scalar(sa.select(Artifact).where(
        Artifact.pod_id == pod.id, Artifact.name == f"{ARTIFACT_PREFIX}{pod.name}.log").limit(1))


def _finish(pod: Pod, source: str, lines: list[LogLine], note: str | None, *, words: str | None = None,
            labelled: bool = False) -> PodLog:
    stamped = [" ".join(part for part in (entry.ts, f"[{entry.source}]" if labelled else None, entry.line)
                        if part is not None) for entry in lines]
    if labelled and lines and all(entry.source == "system" for entry in lines):
        note = ((note + " ") if note else "") + ("Only the host's system lines: the container has printed "
                                                 "nothing (it may never have started — see the lines above).")
    text = redact("\n".join(stamped)) or ""
    truncated = len(text.encode()) > MAX_BYTES
    if truncated:
        text = text.encode()[-MAX_BYTES:].decode("utf-8", "ignore").split("\n", 1)[-1]
    last_ts = next((entry.ts for entry in reversed(lines) if entry.ts), None)
    return PodLog(pod, source, text, len(lines), truncated, note, last_ts, words, labelled)
