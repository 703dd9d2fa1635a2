"""Owner-editable settings: stored in the Setting table, defaults from config.py."""
from __future__ import annotations

from flask import current_app

from models import Setting, db

# key → config name holding the default
EDITABLE = {
    "auto_approve_max_usd": "SAGAN_AUTO_APPROVE_MAX_USD",
    "gpu_prices": None,  # {short name: USD per GPU-hour}; catalogue reference rates otherwise
}


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
