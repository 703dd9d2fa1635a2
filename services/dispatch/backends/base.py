"""The one interface every pod backend implements, and the register of backends by name (the
choice of backend per account is `factory`, through the pod-accounts table).

A backend module registers a builder under its name with `registers_backend`; an account's
entry in services/core/pod_accounts.py names that backend. So a new provider is its module
and its table entry: nothing else names it.

Backends speak in provider terms (`ProviderPod.status` is RunPod's vocabulary, also used
by the local backend); mapping those onto Sagan's own pod statuses is the watcher's job.
Errors are raised as `BackendError` carrying a failure reason code from the registry, so
the provisioner can decide without parsing messages (its create table, `provisioner.create_rule`):
`provider_capacity` moves on to the next candidate, `provider_balance` gives up the
account, `provider_error` may have created a pod anyway (look it up by name before trying
again).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from services.core import registry
from services.core.pod_accounts import PodAccount

PROVIDER_STATUSES = ("PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED")


@dataclass
class PodRequest:
    """One create call: a single GPU type, count and cloud (substitution happens above)."""

    name: str
    image: str
    args: str                       # the container command string (the spec's dockerArgs)
    gpu_id: str                     # provider GPU id, e.g. "NVIDIA A100-SXM4-80GB"
    gpu_count: int
    cloud: str                      # SECURE | COMMUNITY
    disk_gb: int                    # container disk
    volume_gb: int                  # persistent volume mounted at /workspace
    env: dict[str, str]
    data_center_ids: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=lambda: ["22/tcp"])
    # URLs a local pod may reach even when they are on the Sagan host, from Sagan's own
    # settings, never from the plan (the owner's research repository); the pod API of
    # SAGAN_PROGRESS_URL / SAGAN_ARTIFACT_URL always is. Other backends ignore it.
    host_urls: list[str] = field(default_factory=list)


@dataclass
class ProviderPod:
    """What the provider says about one pod right now."""

    id: str
    name: str
    status: str                     # one of PROVIDER_STATUSES
    cost_per_hr: float = 0.0        # USD per hour; 0 once EXITED or TERMINATED
    uptime_seconds: int = 0
    gpu_id: str | None = None
    gpu_count: int = 0
    data_center_id: str | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None     # the user to connect as (RunPod's proxy gives a routing token)
    exit_code: int | None = None    # known for local pods; RunPod does not report it

    @property
    def finished(self) -> bool:
        """The container is no longer running (it exited, failed or was terminated)."""
        return self.status in ("EXITED", "ERROR", "TERMINATED")


@dataclass
class LogLine:
    """One line of a pod's output; `ts` is the provider's RFC 3339 time when it has one
    (RunPod's log events), None for a plain log file."""

    line: str
    ts: str | None = None
    source: str = "container"


class BackendError(Exception):
    """A provider call failed; `.reason` is a failure reason code (registry.FAILURE_REASONS).

    provider_capacity: no instances / capacity for this candidate;
    provider_balance: the account's balance is too low to deploy (RunPod's 402);
    provider_auth: 401/403 or no key configured;
    spec_invalid: 400/422 validation, or a request this backend cannot serve;
    provider_error: 5xx, timeouts, rate limits that outlast the retries, anything else.
    What the provisioner does after each (with `.status`) is its create table
    (`provisioner.create_rule`).
    `.status` is the HTTP status when there was one (e.g. 409 for an invalid action).
    """

    def __init__(self, reason: str, message: str, *, status: int | None = None):
        if reason not in registry.FAILURE_REASONS:
            raise ValueError(f"unknown failure reason {reason!r}")
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@runtime_checkable
class PodBackend(Protocol):
    name: str  # the pod account it serves (services/core/pod_accounts.py)

    def create(self, request: PodRequest) -> ProviderPod: ...

    def get(self, pod_id: str) -> ProviderPod | None: ...

    def list_by_name(self, name: str) -> list[ProviderPod]: ...

    def list_all(self, prefix: str = "sagan-") -> list[ProviderPod]: ...

    def stop(self, pod_id: str) -> ProviderPod | None: ...

    def terminate(self, pod_id: str) -> None: ...

    def logs(self, pod_id: str, *, tail: int = 100, since: str | None = None) -> list[LogLine] | None:
        """The pod's last `tail` lines (or those after `since`); None when the provider no
        longer has the pod (its uploaded log artifact is then the only copy)."""
        ...


# A builder makes the backend serving one account from Sagan's settings (`config`: a Flask
# config, a Config class or instance; read it with `setting`). It raises BackendError when
# the account cannot be served here (no key, the backend turned off).
BackendBuilder = Callable[[PodAccount, Any], PodBackend]
BUILDERS: dict[str, BackendBuilder] = {}


def registers_backend(name: str) -> Callable[[BackendBuilder], BackendBuilder]:
    """Register the decorated builder as backend `name`, the name pod accounts give."""
    def register(builder: BackendBuilder) -> BackendBuilder:
        BUILDERS[name] = builder
        return builder
    return register


def setting(config, name: str, default=None):
    """A setting from a Flask config (a dict), a Config class or instance."""
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)
