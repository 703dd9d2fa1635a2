"""A run's configuration: the settings a pod ran with (seed, condition, learning rate…), kept on
the pod so charts and the compare view can group runs by one of them.

Two sources, merged: the pod spec's `env` (every variable the plan set for that pod, Sagan's
own `SAGAN_*` aside), stored when the pod is created, and what the training script reports
itself through the metrics helper (`sagan_metrics.config(seed=3, lr=3e-4)`, POST
/api/metrics/config), which wins on a clash — the script knows what it parsed. The result
lives in `pods.metadata["config"]` as short text keys and values (a number stays a number),
so reading it for a chart is a column of the pod row the chart query joins already.
"""
from __future__ import annotations

import math

from models import Pod, db
from services.core.errors import ValidationError
from services.core.redact import redact

KEYS_MAX = 24
KEY_MAX = 40
VALUE_MAX = 80
# Sagan's own variables and tools' settings say where and how to run, not how the experiment
# differs between pods.
_OWN_PREFIXES = ("SAGAN_", "PYTHON", "PATH", "HF_", "WANDB_")


def from_spec(pod_spec: dict) -> dict:
    """The pod spec's env as a configuration: the plan's own variables, keys lower-cased
    (`SEED` and `seed` group together), values as numbers where they read as one."""
    config: dict = {}
    for key, value in (pod_spec.get("env") or {}).items():
        if not isinstance(key, str) or key.upper().startswith(_OWN_PREFIXES) or len(config) >= KEYS_MAX:
            continue
        config[key.lower()[:KEY_MAX]] = _value(str(value))
    return _redacted(config)


def _value(text: str):
    """"3" → 3, "3e-4" → 0.0003, anything else stays text (cut to VALUE_MAX)."""
    try:
        number = float(text)
    except ValueError:
        return text[:VALUE_MAX]
    if not math.isfinite(number):
        return text[:VALUE_MAX]
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


def _redacted(config: dict) -> dict:
    """Keys and text values pass the redactor: they are shown on pages."""
    return {redact(k) or k: (redact(v) or "") if isinstance(v, str) else v for k, v in config.items()}


def parse(data) -> dict:
    """A configuration posted by the metrics helper: {"config": {name: text or number}}.
    Anything else is a 400 naming the problem; nothing is stored."""
    if not isinstance(data, dict) or set(data) != {"config"} or not isinstance(data["config"], dict):
        raise ValidationError('The body must be {"config": {"name": value, …}}.', field="config")
    config = data["config"]
    if not 1 <= len(config) <= KEYS_MAX:
        raise ValidationError(f"A configuration has 1–{KEYS_MAX} keys.", field="config")
    cleaned: dict = {}
    for key, value in config.items():
        if not 1 <= len(key) <= KEY_MAX or not key.isprintable():
            raise ValidationError(f"config key {key[:KEY_MAX]!r} must be printable text of 1–{KEY_MAX} characters.",
                                  field="config")
        if isinstance(value, bool) or value is None:
            value = str(value).lower()
        if isinstance(value, (int, float)):
            if not math.isfinite(value) or abs(value) > 1e300:
                raise ValidationError(f"config.{key} must be a finite number or text.", field="config")
        elif isinstance(value, str):
            if len(value) > VALUE_MAX or not value.isprintable():
                raise ValidationError(f"config.{key} must be printable text of at most {VALUE_MAX} characters.",
                                      field="config")
        else:
            raise ValidationError(f"config.{key} must be a number or text.", field="config")
        cleaned[key.lower()] = value
    return _redacted(cleaned)


def record(pod_id, config: dict) -> dict:
    """Merge a posted configuration into the pod's (the script's keys win); the merged one.
    The pod's row is locked while its metadata is rewritten: the watcher writes other keys
    of it, and neither may lose the other's."""
    pod = db.session.get(Pod, pod_id, with_for_update=True)
    meta = dict(pod.metadata_ or {})
    merged = {**(meta.get("config") or {}), **config}
    if len(merged) > KEYS_MAX:
        db.session.rollback()
        raise ValidationError(f"The pod's configuration would have {len(merged)} keys; the limit is {KEYS_MAX}.",
                              field="config")
    meta["config"] = merged
    pod.metadata_ = meta
    db.session.commit()
    return merged


def of(pod_metadata: dict | None, run_index: int) -> dict:
    """A run's configuration as a chart groups by it: the stored keys and its run index."""
    return {"run": run_index, **((pod_metadata or {}).get("config") or {})}
