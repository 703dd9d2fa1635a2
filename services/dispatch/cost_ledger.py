"""What an experiment costs: the plan's estimate against what was spent, split into agent
tokens and GPU time, with the burn rate of the pods running now (SPEC §6.8).

Agent tokens are the sum of the experiment's agent runs' `cost_usd`. A run whose model has
no known price records a cost of NULL (the agent loop never makes up $0.00): the ledger
counts such runs and says "price unknown" for them rather than adding a false $0.00. GPU time
is services/dispatch/spend.py's: rate × uptime per pod; a pod that ran without a known rate is
counted as unknown too. Everything here is a constant number of queries for any number of
experiments (the board shows every card's spend).
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from models import AgentRun, Experiment, PlanVersion, db
from services.core import pod_accounts, records
from services.dispatch import spend


@dataclass
class Ledger:
    agents_usd: float = 0.0
    agent_runs: int = 0
    agent_tokens: int = 0
    agents_unpriced: int = 0          # runs with tokens whose model has no price
    gpu_usd: float = 0.0
    gpu_unpriced: int = 0             # pods that ran at an unknown rate
    pods_running: int = 0
    pods_running_unpriced: int = 0
    burn_usd_per_hour: float = 0.0    # the running pods' rates, summed
    pods: int = 0                     # pods dispatched, whatever their status
    pods_local: int = 0               # of which on this machine: they bill nothing
    estimate_usd: float | None = None  # the latest plan's GPU estimate (None: none, or unknown prices)
    estimate_known_usd: float | None = None  # what the estimate's known prices add up to
    estimate_unpriced: tuple = ()     # GPUs the estimate had no price for
    estimate_local: bool = False      # the estimate's pods all run on this machine: nothing to bill

    @property
    def total_usd(self) -> float:
        return self.agents_usd + self.gpu_usd

    @property
    def price_unknown(self) -> bool:
        """Some of what was spent has no price: the total is a lower bound."""
        return bool(self.agents_unpriced or self.gpu_unpriced)

    @property
    def burning(self) -> bool:
        """Pods run now at a rate above zero, or at a rate nobody knows (local pods bill nothing)."""
        return bool(self.burn_usd_per_hour or self.pods_running_unpriced)

    @property
    def worth_a_card(self) -> bool:
        """Something was spent, is being spent, or has no price: a card never says "$0.00"."""
        return bool(self.total_usd or self.price_unknown or self.burning)

    @property
    def over_estimate(self) -> bool:
        return self.estimate_usd is not None and self.gpu_usd > self.estimate_usd

    @property
    def gpu_free(self) -> bool:
        """Every pod so far ran on this machine: GPU time cost nothing, and that is known."""
        return bool(self.pods) and self.pods == self.pods_local

    @property
    def unknown_because(self) -> str:
        """Why part of the spend has no price, in words ("" when all of it has one)."""
        parts = []
        if self.agents_unpriced:
            runs = self.agents_unpriced
            parts.append(f"{runs} agent run{'' if runs == 1 else 's'} used a model without a price")
        if self.gpu_unpriced:
            pods = self.gpu_unpriced
            parts.append(f"{pods} pod{'' if pods == 1 else 's'} on a billing account ran without a known hourly rate")
        return "; ".join(parts)

    @property
    def spent_words(self) -> str:
        """What was spent so far, as a sentence: the known amount, its parts, and what has no
        price — never "$0.00 + price unknown"."""
        gpu = ("no charge for GPUs (local pods)" if self.gpu_free and not self.gpu_usd
               else f"{usd(self.gpu_usd)} on GPUs" if self.gpu_usd or self.pods else "no GPU time yet")
        agents = f"{usd(self.agents_usd)} on agent tokens" if self.agent_runs else "no agent runs yet"
        known = self.total_usd
        if not self.price_unknown:
            return f"{usd(known)}: {agents}, {gpu}."
        if known:
            return f"At least {usd(known)} ({agents}, {gpu}); the rest has no price: {self.unknown_because}."
        return f"Not known: {self.unknown_because}. Everything else cost nothing ({gpu})."

    @property
    def estimate_words(self) -> str | None:
        """The plan's GPU estimate against the GPU time spent, as a sentence (None: no estimate)."""
        if self.estimate_usd is None:
            return None
        if not self.estimate_usd:
            planned = "The plan expected no GPU charge (its pods run on this machine)" if self.gpu_free \
                else "The plan expected no GPU charge"
            spent = "none so far" if not self.gpu_usd and not self.gpu_unpriced else \
                f"{usd(self.gpu_usd)} so far" + (" plus time at an unknown rate" if self.gpu_unpriced else "")
            return f"{planned}; {spent}."
        share = round(100 * self.gpu_usd / self.estimate_usd)
        unknown = " plus time at an unknown rate" if self.gpu_unpriced else ""
        return (f"GPUs have cost {usd(self.gpu_usd)}{unknown} of the {usd(self.estimate_usd)} the plan estimated "
                f"({share}%).")


def usd(value: float) -> str:
    """A known amount: cents, or three significant digits below a cent, so a real spend of a
    fraction of a cent never reads as $0.00 (the pages' `usd` filter)."""
    if 0 < abs(value) < 0.01:
        return f"${value:.3g}"
    return f"${value:,.2f}"



def _agent_costs(ids: list) -> dict:
    rows = db.session.execute(
        sa.select(AgentRun.scope_id, sa.func.count(), sa.func.count().filter(AgentRun.cost_usd.is_(None)),
                  sa.func.coalesce(sa.func.sum(AgentRun.cost_usd), 0),
                  sa.func.coalesce(sa.func.sum(AgentRun.input_tokens + AgentRun.output_tokens), 0))
        .where(AgentRun.scope_kind == "experiment", records.among(AgentRun.scope_id, ids), AgentRun.kind != "experiment")
        .group_by(AgentRun.scope_id))
    out: dict = {}
    for experiment_id, runs, unpriced, cost, tokens in rows:
        ledger = out.setdefault(experiment_id, Ledger())
        ledger.agent_runs += runs
        ledger.agents_usd += float(cost)
        ledger.agent_tokens += int(tokens)
        ledger.agents_unpriced += unpriced
    return out


def _estimates(ids: list) -> dict:
    """experiment id → the estimate of its latest plan version that has one."""
    latest = (sa.select(PlanVersion.experiment_id, sa.func.max(PlanVersion.version).label("version"))
              .where(PlanVersion.experiment_id.in_(ids), PlanVersion.estimate.is_not(None))
              .group_by(PlanVersion.experiment_id).subquery())
    rows = db.session.execute(sa.select(PlanVersion.experiment_id, PlanVersion.estimate).join(
        latest, sa.and_(latest.c.experiment_id == PlanVersion.experiment_id, latest.c.version == PlanVersion.version)))
    return dict(rows.all())


def ledgers_for(experiments: list[Experiment], *, with_estimates: bool = True) -> dict:
    """experiment id → Ledger, for any number of experiments in three queries (two without
    the estimates, as on the board)."""
    ids = [e.id for e in experiments]
    if not ids:
        return {}
    ledgers = _agent_costs(ids)
    for experiment_id, (spent, burn, unpriced, live, live_unpriced, pods, local) in \
            spend.gpu_by_experiment(ids).items():
        ledger = ledgers.setdefault(experiment_id, Ledger())
        ledger.gpu_usd, ledger.burn_usd_per_hour, ledger.gpu_unpriced = spent, burn, unpriced
        ledger.pods_running, ledger.pods_running_unpriced = live, live_unpriced
        ledger.pods, ledger.pods_local = pods, local
    if with_estimates:
        for experiment_id, estimate in _estimates(ids).items():
            if not estimate:  # a JSON null: the plan had no spec to price
                continue
            ledger = ledgers.setdefault(experiment_id, Ledger())
            ledger.estimate_usd = estimate.get("total_usd")
            ledger.estimate_known_usd = estimate.get("known_usd")
            ledger.estimate_unpriced = tuple(estimate.get("unknown_prices") or ())
            ledger.estimate_local = bool(estimate.get("accounts")) and not any(
                pod_accounts.bills(name) for name in estimate["accounts"])
    return {i: ledgers.get(i, Ledger()) for i in ids}


def ledger_for(experiment: Experiment) -> Ledger:
    return ledgers_for([experiment])[experiment.id]


def page_context(experiment: Experiment) -> dict:
    """What templates/experiments/_cost.html needs."""
    return {"ledger": ledger_for(experiment)}
