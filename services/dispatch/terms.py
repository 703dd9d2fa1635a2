"""What the owner's approval fixed for dispatch: the approved plan version, its spec, the pod
account and the cost cap. The provisioner reads these, never the experiment's current fields,
so an edit after approval cannot change what runs or what it may spend."""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from models import ApprovalRequest, Experiment, PlanVersion, db


@dataclass(frozen=True)
class ApprovedTerms:
    """What the owner approved for dispatch: the plan version, its spec, account and cap."""

    approval: ApprovalRequest
    plan_version: PlanVersion
    spec: object
    account: str
    cost_cap_usd: float | None


def approved_terms(experiment: Experiment) -> ApprovedTerms | None:
    """The latest approved plan version's terms, or None when no plan with a spec was approved."""
    approval = db.session.scalar(sa.select(ApprovalRequest).where(
        ApprovalRequest.experiment_id == experiment.id, ApprovalRequest.status == "approved",
        ApprovalRequest.plan_version_id.is_not(None)).order_by(ApprovalRequest.resolved_at.desc()).limit(1))
    version = db.session.get(PlanVersion, approval.plan_version_id) if approval else None
    spec = (version.plan_json or {}).get("spec") if version else None
    if spec is None:
        return None
    return ApprovedTerms(approval, version, spec, approval.pod_account or experiment.pod_account,
                         approval.cost_cap_usd)
