"""RQ entry points for pods: the dispatch saga and the periodic watcher."""
from __future__ import annotations

from services.dispatch import provisioner


def run_dispatch(run_id: str) -> str:
    """Provision the pods of one dispatch run."""
    return provisioner.run_dispatch(run_id)

