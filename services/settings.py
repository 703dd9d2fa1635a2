"""Owner-editable settings: stored in the Setting table, defaults from config.py."""
from __future__ import annotations

from flask import current_app

from models import Setting, db

# key → config name holding the default
EDITABLE = {
    "auto_approve_max_usd": "SAGAN_AUTO_APPROVE_MAX_USD",
    "gpu_prices": None,  # {short name: USD per GPU-hour}; catalogue reference rates otherwise
    "webhook_url": None,  # Slack-compatible incoming webhook for owner-turn notifications
    "daily_cap_usd": None,  # optional spend cap across all experiments per UTC day (off by default)
    "research_repo_url": None,  # the git repository pods check out (SPEC §6.11)
    "research_repo_branch": None,
    "research_repo_test_command": None,
    "research_repo_lint_command": None,
}


def update_webhook(url: str) -> None:
    """Set (or clear, with an empty value) the owner-turn webhook; https and public only."""
    from services.notify import check_outbound_url
    url = (url or "").strip()
    put("webhook_url", check_outbound_url(url) if url else None)


def get(key: str):
    """The owner's value for `key`, else the configured default."""
    row = db.session.get(Setting, key)
    if row is not None:
        return row.value
    config_name = EDITABLE.get(key)
    return current_app.config.get(config_name) if config_name else None


def put(key: str, value) -> None:
    """Store an owner-edited value; the caller commits."""
    if key not in EDITABLE:
        raise KeyError(key)
    row = db.session.get(Setting, key)
    if row is None:
        db.session.add(Setting(key=key, value=value))
    else:
        row.value = value


def gpu_prices() -> dict:
    from services.dispatch.costs import gpu_prices as merge
    return merge(get("gpu_prices") or {})


def update_pricing(form: dict) -> None:
    """Validate and store GPU prices and the auto-approve limit from the settings form.

    Empty price fields mean "use the reference rate" (or unknown when there is none).
    """
    from services.dispatch.spec import GPUS
    from services.errors import ValidationError

    prices = {}
    for gpu in GPUS:
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
    put("gpu_prices", prices)
    put("auto_approve_max_usd", limit)
