"""The pod accounts Sagan knows, as one table: each names the backend that serves it and
declares what its pods are — whether they cost money, whether they run on this host, where a
live pod's log is read, whether they have SSH and volumes, and how a person calls one.

Code that behaves differently per account asks this table (`bills`, `on_this_host`, …)
instead of comparing names, so a new provider is one backend module (it registers itself
under its backend name: services/dispatch/backends/base.py, `registers_backend`), one entry
here and its tests. The names here are also the only values `pod_account` may take: the
services check them against this table (no database CHECK), so adding an account needs no
migration.

It lives in core, not beside the backends, because validating an experiment's account
(workflow) and importing the old system's (planning) read it too.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PodAccount:
    name: str
    backend: str          # the name its backend registered under (backends/base.py, registers_backend)
    bills_money: bool     # its pods cost money by the hour: a rate, or "price unknown" — never $0
    on_this_host: bool    # its pods are sandboxed processes on the Sagan host
    log_source: str       # where a live pod's log is read: the provider's stream, or output.log here
    log_words: str        # that place, as a reader is told it ("RunPod's log stream")
    log_labelled: bool    # its lines come from several sources (container, host), each labelled
    log_timed: bool       # its lines carry a time, so `since` can narrow a read
    has_ssh: bool
    has_volumes: bool
    pod_label: str        # how a person calls one of its pods
    # The Sagan settings this account's backend reads, by what they hold ("api_key",
    # "team_id"): two accounts on one provider differ only here, so the backend never
    # branches on an account's name.
    settings: Mapping[str, str] = field(default_factory=dict)


# What a pod on any RunPod account is; the two accounts differ only in their settings.
_RUNPOD_POD = dict(backend="runpod", bills_money=True, on_this_host=False, log_source="runpod",
                  log_words="RunPod's log stream", log_labelled=True, log_timed=True, has_ssh=True,
                  has_volumes=True, pod_label="RunPod pod")

ACCOUNTS: dict[str, PodAccount] = {
    "team": PodAccount("team", **_RUNPOD_POD,
                       settings={"api_key": "RUNPOD_API_KEY_TEAM", "team_id": "RUNPOD_TEAM_ID"}),
    "personal": PodAccount("personal", **_RUNPOD_POD, settings={"api_key": "RUNPOD_API_KEY_PERSONAL"}),
    "local": PodAccount("local", backend="local", bills_money=False, on_this_host=True, log_source="local",
                        log_words="the local pod's output.log", log_labelled=False, log_timed=False,
                        has_ssh=False, has_volumes=False, pod_label="Local pod"),
}


def names() -> tuple[str, ...]:
    """Every account a pod may run on, in the table's order."""
    return tuple(ACCOUNTS)


def free() -> tuple[str, ...]:
    """For queries: the accounts whose pods bill nothing (an unknown name is taken to bill).
    A function, not a constant, so an entry added at run time (a test's provider) counts."""
    return tuple(name for name, account in ACCOUNTS.items() if not account.bills_money)


def on_host() -> tuple[str, ...]:
    """The accounts whose pods run on this host (the demo's pods are drawn on the first)."""
    return tuple(name for name, account in ACCOUNTS.items() if account.on_this_host)


def with_ssh() -> tuple[str, ...]:
    """The accounts whose pods are reached over SSH (each has its own SSH key)."""
    return tuple(name for name, account in ACCOUNTS.items() if account.has_ssh)


def get(name: str | None) -> PodAccount | None:
    return ACCOUNTS.get(name or "")


def bills(name: str | None) -> bool:
    """Do this account's pods cost money? An account Sagan does not know is taken to: its
    price is then unknown, never a false $0."""
    account = get(name)
    return account is None or account.bills_money


def on_this_host(name: str | None) -> bool:
    account = get(name)
    return account is not None and account.on_this_host


def log_source(name: str | None) -> str:
    account = get(name)
    return account.log_source if account is not None else "runpod"


def pod_label(name: str | None) -> str:
    account = get(name)
    return account.pod_label if account is not None else "pod"
