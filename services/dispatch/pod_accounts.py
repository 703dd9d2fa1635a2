"""The pod accounts Sagan knows, as one table: each names the backend that serves it and
declares what its pods are — whether they cost money, whether they run on this host, where a
live pod's log is read, whether they have SSH and volumes, and how a person calls one.

Code that behaves differently per account asks this table (`bills`, `on_this_host`, …)
instead of comparing names, so a new provider is one backend module
(services/dispatch/backends/), one entry here and its tests. The names are also the values
`runpod_account` may take (services/core/registry.py's RUNPOD_ACCOUNTS, checked equal by a test).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PodAccount:
    name: str
    backend: str          # the backend module that serves it (backends/factory.py)
    bills_money: bool     # its pods cost money by the hour: a rate, or "price unknown" — never $0
    on_this_host: bool    # its pods are sandboxed processes on the Sagan host
    log_source: str       # where a live pod's log is read: the provider's stream, or output.log here
    has_ssh: bool
    has_volumes: bool
    pod_label: str        # how a person calls one of its pods


ACCOUNTS: dict[str, PodAccount] = {
    "team": PodAccount("team", "runpod", bills_money=True, on_this_host=False, log_source="runpod",
                       has_ssh=True, has_volumes=True, pod_label="RunPod pod"),
    "personal": PodAccount("personal", "runpod", bills_money=True, on_this_host=False, log_source="runpod",
                           has_ssh=True, has_volumes=True, pod_label="RunPod pod"),
    "local": PodAccount("local", "local", bills_money=False, on_this_host=True, log_source="local",
                        has_ssh=False, has_volumes=False, pod_label="Local pod"),
}
# For queries: the accounts whose pods bill nothing (an unknown name is taken to bill).
FREE = tuple(name for name, account in ACCOUNTS.items() if not account.bills_money)


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
