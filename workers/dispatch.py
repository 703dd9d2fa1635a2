"""RQ entry points for pods: the dispatch saga and the periodic watcher."""
from __future__ import annotations

from services.dispatch import provisioner, watcher


def run_dispatch(run_id: str) -> str:
    """Provision the pods of one dispatch run."""
    return provisioner.run_dispatch(run_id)



def settle_local_pod(pod_id: str) -> str:
    """Stop (or terminate) a pod on this host for a process that could not: on `local` only."""
    return watcher.settle_local_pod(pod_id)


def sweep_local_orphans() -> list[str]:
    """Stop this host's orphan pods for a scheduler that may not list them: on `local` only."""
    return watcher.sweep_local_orphans()
