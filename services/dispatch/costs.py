"""Cost estimates from a spec (SPEC §6.8).

GPU price × count × hours plus storage at $0.10 per GB-month. A GPU without a known
price is reported as unknown — never guessed — and the total says it is incomplete.
Prices come from the catalogue's reference rates, overridden by the owner's settings
(`owner_gpu_prices`; `update_pricing` checks and stores them from the settings form).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from services.core import pod_accounts, settings
from services.core.errors import ValidationError
from services.dispatch import spec as specs

STORAGE_USD_PER_GB_MONTH = 0.10
HOURS_PER_MONTH = 730.0
PRICE_UNKNOWN = "price unknown — set it in settings"


def accounts_of(pods: list[dict], account: str) -> set[str]:
    """Every account a dispatch of these pods may use: the given one and any the
    substitution policies allow (the provisioner may fall back to them)."""
    found = {account}
    for pod in pods or []:
        policy = ((pod.get("substitution_policy") or {}).get("account") or {}) if isinstance(pod, dict) else {}
        if isinstance(policy, dict):
            found |= {a for a in [policy.get("prefer"), *(policy.get("allowed") or [])] if isinstance(a, str)}
    return found


def is_paid(accounts: set[str]) -> bool:
    """Does any of these accounts bill (everything but the local backend)?"""
    return any(pod_accounts.bills(a) for a in accounts)


def gpu_prices(overrides: dict | None = None) -> dict[str, float | None]:
    """USD per GPU-hour by catalogue short name: reference rates, then owner overrides."""
    prices = {g.short: g.reference_price for g in specs.GPUS}
    for name, value in (overrides or {}).items():
        gpu = specs.find_gpu(name)
        if gpu is not None and isinstance(value, (int, float)) and value >= 0:
            prices[gpu.short] = float(value)
    return prices


def owner_gpu_prices() -> dict[str, float | None]:
    """The catalogue's reference rates with the owner's prices (settings) over them."""
    return gpu_prices(settings.get("gpu_prices") or {})


def update_pricing(form: dict) -> None:
    """Validate and store GPU prices and the auto-approve limit from the settings form.

    Empty price fields mean "use the reference rate" (or unknown when there is none).
    """
    prices = {}
    for gpu in specs.GPUS:
        raw = (form.get(f"price-{gpu.short}") or "").strip()
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            raise ValidationError(f"The price for {gpu.short} must be a number of dollars per GPU-hour.",
                                  field=f"price-{gpu.short}")
        if not 0 <= value <= 1000:
            raise ValidationError(f"The price for {gpu.short} must be between 0 and 1,000 $/GPU-hour.",
                                  field=f"price-{gpu.short}")
        prices[gpu.short] = value
    raw_limit = (form.get("auto_approve_max_usd") or "").strip()
    try:
        limit = float(raw_limit)
    except ValueError:
        raise ValidationError("The auto-approve limit must be a number of dollars.", field="auto_approve_max_usd")
    if not 0 <= limit <= 100_000:
        raise ValidationError("The auto-approve limit must be between 0 and 100,000 dollars.",
                              field="auto_approve_max_usd")
    raw_daily = (form.get("daily_cap_usd") or "").strip()
    daily = None
    if raw_daily:
        try:
            daily = float(raw_daily)
        except ValueError:
            raise ValidationError("The daily cap must be a number of dollars, or empty for none.",
                                  field="daily_cap_usd")
        if not 0 < daily <= 1_000_000:
            raise ValidationError("The daily cap must be above 0 (or empty for none).", field="daily_cap_usd")
    settings.put("gpu_prices", prices)
    settings.put("auto_approve_max_usd", limit)
    settings.put("daily_cap_usd", daily)


@dataclass
class PodEstimate:
    index: int
    name: str
    gpu: str
    gpu_count: int
    hours: float
    price_per_gpu_hour: float | None
    gpu_usd: float | None
    storage_usd: float
    total_usd: float | None
    cheapest: dict | None = None
    dearest: dict | None = None


@dataclass
class Estimate:
    pods: list[PodEstimate] = field(default_factory=list)
    total_usd: float | None = 0.0
    hours: float = 0.0            # wall-clock: pods run in parallel
    gpu_hours: float = 0.0
    unknown_prices: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "total_usd": None if self.total_usd is None else round(self.total_usd, 2),
            # What the known prices add up to, so a partly priced spec still says something true.
            "known_usd": round(sum(p.total_usd for p in self.pods if p.total_usd is not None), 2),
            "hours": round(self.hours, 2), "gpu_hours": round(self.gpu_hours, 2),
            "unknown_prices": self.unknown_prices,
            "note": PRICE_UNKNOWN if self.unknown_prices else None,
            "pods": [{
                "index": p.index, "name": p.name, "gpu": p.gpu, "gpu_count": p.gpu_count,
                "hours": round(p.hours, 2), "price_per_gpu_hour": p.price_per_gpu_hour,
                "gpu_usd": None if p.gpu_usd is None else round(p.gpu_usd, 2),
                "storage_usd": round(p.storage_usd, 2),
                "total_usd": None if p.total_usd is None else round(p.total_usd, 2),
                "cheapest": p.cheapest, "dearest": p.dearest,
            } for p in self.pods],
        }


def _pod_cost(gpu_short: str, count: int, hours: float, disk_gb: int,
              prices: dict[str, float | None]) -> tuple[float | None, float | None, float]:
    price = prices.get(gpu_short)
    storage = disk_gb * STORAGE_USD_PER_GB_MONTH * hours / HOURS_PER_MONTH
    gpu_usd = None if price is None else price * count * hours
    return price, gpu_usd, storage


def estimate(pods: list[dict], prices: dict[str, float | None] | None = None, *, local: bool = False) -> Estimate:
    """Per-pod and total estimate for validated pods; unknown prices stay unknown.

    `local`: the pods run on the Sagan host (the local backend), which bills nothing.
    """
    if local:
        prices = {g.short: 0.0 for g in specs.GPUS}
    prices = prices if prices is not None else gpu_prices()
    result = Estimate()
    for index, pod in enumerate(pods):
        gpu = specs.find_gpu(pod.get("gpuType"))
        if gpu is None:
            continue
        count = pod.get("gpuCount") or 1
        hours = (pod.get("estimatedMinutes") or 60) / 60.0
        disk = (pod.get("volumeGb") or 0) + (pod.get("containerDiskGb") or 0)
        price, gpu_usd, storage = _pod_cost(gpu.short, count, hours, disk, prices)
        storage = 0.0 if local else storage
        total = None if gpu_usd is None else gpu_usd + storage
        pod_estimate = PodEstimate(index, pod.get("name") or f"pod {index}", gpu.short, count, hours,
                                   price, gpu_usd, storage, total)
        candidates = []
        for name in ((pod.get("substitution_policy") or {}).get("gpuType") or {}).get("allowed") or []:
            alt = specs.find_gpu(name)
            if alt is None or prices.get(alt.short) is None:
                continue
            _, alt_gpu, alt_storage = _pod_cost(alt.short, count, hours, disk, prices)
            candidates.append({"gpu": alt.short, "total_usd": round(alt_gpu + alt_storage, 2)})
        if candidates:
            pod_estimate.cheapest = min(candidates, key=lambda c: c["total_usd"])
            pod_estimate.dearest = max(candidates, key=lambda c: c["total_usd"])
        if price is None and gpu.short not in result.unknown_prices:
            result.unknown_prices.append(gpu.short)
        result.pods.append(pod_estimate)
        result.hours = max(result.hours, hours)
        result.gpu_hours += hours * count
        if result.total_usd is not None:
            result.total_usd = None if total is None else result.total_usd + total
    return result
