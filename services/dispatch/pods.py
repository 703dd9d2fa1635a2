"""Queries about a dispatch's pods that the watcher, the agent loop and the pages share."""
from __future__ import annotations

import sqlalchemy as sa

from models import Pod, db


def pods_of(run_id) -> list[Pod]:
    """The pods that count for a dispatch: the last attempt of each run index."""
    rows = list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id)
                                   .order_by(Pod.run_index, Pod.attempt)))
    latest: dict[int, Pod] = {}
    for pod in rows:
        if pod.provider_pod_id is not None or pod.status != "failed":
            latest[pod.run_index] = pod
    return list(latest.values())
