"""RQ entry points for pods: the dispatch saga and the periodic watcher."""
from __future__ import annotations


def run_dispatch(run_id: str) -> str:
    """Provision the pods of one dispatch run."""
    from services.dispatch import provisioner
    return provisioner.run_dispatch(run_id)

