"""Toy Cloud: a pod provider that exists only in the tests, to prove that a new provider is
one backend module and one pod-accounts entry (docs/pods.md, "A new provider").

It is this module and `ACCOUNT`, nothing else: the module registers its backend under the
name "toycloud" (`registers_backend`), and a test adds `ACCOUNT` to the table
(`pod_accounts.ACCOUNTS`) and puts a `ToyCloud` in the app's settings under the name the
entry gives (`TOYCLOUD`). No module of Sagan names it.

The provider itself is in memory, with a clock of its own (`advance(seconds)`; nothing
sleeps), and behaves the way the providers Sagan knows do — the behaviour modelled on
RunPod's published API reference v2, as read 2026-12-02 (tests/fakes/runpod_server.py):

- create answers at once with the pod's id, PROVISIONING, and its hourly rate
  (`rate_per_gpu_hour` × GPUs); the pod is RUNNING after `boot_seconds`, its uptime counted
  from then;
- a listing lags: a new pod is absent from `list_by_name` and `list_all` for
  `listing_lag` seconds (get by id finds it at once);
- `no_capacity(gpu_id)` — creates for that GPU are refused as `provider_capacity`;
- `fail_after_create()` — the next create makes the pod, then fails as `provider_error` (an
  upstream error after the pod exists, as RunPod's 5xx may be: look it up by name, once the
  listing has caught up, before creating another);
- `exit_pod(pod_id, code)` — the container ends: EXITED, no longer billed (rate 0), its
  exit code reported (like the local backend; RunPod reports none);
- stop is idempotent: stopping a stopped pod answers it as it is, never an error; a stopped
  pod keeps its volume (EXITED) until `terminate`, after which get answers None (404);
- logs are lines with a time each, read with `tail` and `since`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from services.core.pod_accounts import PodAccount
from services.dispatch.backends.base import (
    BackendError,
    LogLine,
    PodRequest,
    ProviderPod,
    registers_backend,
    setting,
)

RATE_PER_GPU_HOUR = 2.0

ACCOUNT = PodAccount(
    "toycloud", "toycloud", bills_money=True, on_this_host=False, log_source="toycloud",
    log_words="Toy Cloud's log", log_labelled=False, log_timed=True, has_ssh=False, has_volumes=True,
    pod_label="Toy Cloud pod", settings={"cloud": "TOYCLOUD"})


@dataclass
class ToyPod:
    id: str
    name: str
    gpu_id: str
    gpu_count: int
    created_at: float
    env: dict[str, str]
    status: str = "PROVISIONING"
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    log: list[tuple[float, str]] = field(default_factory=list)


class ToyCloud:
    """The provider's side: every account's pods, its clock, and the calls it was sent."""

    def __init__(self, *, rate_per_gpu_hour: float = RATE_PER_GPU_HOUR, boot_seconds: float = 30.0,
                 listing_lag: float = 10.0):
        self.rate_per_gpu_hour = rate_per_gpu_hour
        self.boot_seconds = boot_seconds
        self.listing_lag = listing_lag
        self.now = 0.0
        self.pods: dict[str, ToyPod] = {}
        self.calls: list[tuple[str, str]] = []   # (call, pod id or name)
        self._full: set[str] = set()
        self._fail_after_create = 0
        self._ids = itertools.count(1)

    # --- what a test does ---------------------------------------------------------
    def advance(self, seconds: float) -> None:
        self.now += seconds
        for pod in self.pods.values():
            if pod.status == "PROVISIONING" and self.now - pod.created_at >= self.boot_seconds:
                pod.status, pod.started_at = "RUNNING", pod.created_at + self.boot_seconds

    def no_capacity(self, gpu_id: str) -> None:
        self._full.add(gpu_id)

    def fail_after_create(self, times: int = 1) -> None:
        self._fail_after_create += times

    def exit_pod(self, pod_id: str, code: int = 0) -> None:
        pod = self.pods[pod_id]
        pod.status, pod.exit_code, pod.ended_at = "EXITED", code, self.now

    def print(self, pod_id: str, *lines: str) -> None:
        self.pods[pod_id].log.extend((self.now, line) for line in lines)

    def status_of(self, pod_id: str) -> str | None:
        pod = self.pods.get(pod_id)
        return pod.status if pod else None

    def count(self, call: str) -> int:
        return sum(1 for made, _ in self.calls if made == call)

    # --- what the provider answers ------------------------------------------------
    def view(self, pod: ToyPod) -> ProviderPod:
        running = pod.status == "RUNNING"
        end = pod.ended_at if pod.ended_at is not None else self.now
        uptime = int(end - pod.started_at) if pod.started_at is not None else 0
        return ProviderPod(id=pod.id, name=pod.name, status=pod.status,
                           cost_per_hr=self.rate_per_gpu_hour * pod.gpu_count if pod.status in (
                               "PROVISIONING", "RUNNING") else 0.0,
                           uptime_seconds=uptime if running or pod.ended_at is not None else 0,
                           gpu_id=pod.gpu_id, gpu_count=pod.gpu_count, data_center_id="toy-1",
                           exit_code=pod.exit_code)

    def listed(self) -> list[ToyPod]:
        return [pod for pod in self.pods.values() if self.now - pod.created_at >= self.listing_lag]


class ToyCloudBackend:
    """One Toy Cloud account: the PodBackend interface over the in-memory provider."""

    def __init__(self, name: str, cloud: ToyCloud):
        self.name = name
        self.cloud = cloud

    def create(self, request: PodRequest) -> ProviderPod:
        self.cloud.calls.append(("create", request.name))
        if request.gpu_id in self.cloud._full:
            raise BackendError("provider_capacity", f"Toy Cloud has no {request.gpu_id} free right now.")
        pod = ToyPod(id=f"toy-{next(self.cloud._ids):04d}", name=request.name, gpu_id=request.gpu_id,
                     gpu_count=request.gpu_count, created_at=self.cloud.now, env=dict(request.env))
        self.cloud.pods[pod.id] = pod
        if self.cloud._fail_after_create:
            self.cloud._fail_after_create -= 1
            raise BackendError("provider_error", "Toy Cloud answered 502 Bad Gateway.", status=502)
        return self.cloud.view(pod)

    def get(self, pod_id: str) -> ProviderPod | None:
        self.cloud.calls.append(("get", pod_id))
        pod = self.cloud.pods.get(pod_id)
        return self.cloud.view(pod) if pod else None

    def list_by_name(self, name: str) -> list[ProviderPod]:
        return [self.cloud.view(pod) for pod in self.cloud.listed() if pod.name == name]

    def list_all(self, prefix: str = "sagan-") -> list[ProviderPod]:
        return [self.cloud.view(pod) for pod in self.cloud.listed() if pod.name.startswith(prefix)]

    def stop(self, pod_id: str) -> ProviderPod | None:
        self.cloud.calls.append(("stop", pod_id))
        pod = self.cloud.pods.get(pod_id)
        if pod is None:
            return None
        if pod.status not in ("EXITED", "TERMINATED"):
            pod.status, pod.ended_at = "EXITED", self.cloud.now
        return self.cloud.view(pod)

    def terminate(self, pod_id: str) -> None:
        self.cloud.calls.append(("terminate", pod_id))
        self.cloud.pods.pop(pod_id, None)

    def logs(self, pod_id: str, *, tail: int = 100, since: str | None = None) -> list[LogLine] | None:
        pod = self.cloud.pods.get(pod_id)
        if pod is None:
            return None
        lines = [LogLine(line, ts=f"2026-12-02T00:{int(at) // 60 % 60:02d}:{int(at) % 60:02d}Z")
                 for at, line in pod.log]
        if since:
            lines = [entry for entry in lines if entry.ts > since]
        return lines[-tail:]


@registers_backend("toycloud")
def build(account: PodAccount, config) -> ToyCloudBackend:
    """The backend for a Toy Cloud account: the provider the settings name (a test's)."""
    cloud = setting(config, account.settings["cloud"])
    if not isinstance(cloud, ToyCloud):
        raise BackendError("provider_auth", f"No Toy Cloud is configured for the {account.name} account: "
                                            f"set {account.settings['cloud']}.")
    return ToyCloudBackend(account.name, cloud)
