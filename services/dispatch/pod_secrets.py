"""Which server secrets a pod may receive.

A runpod-spec's `secrets` list names environment variables that the provisioner copies
from the server's environment into the pod at create time. Any name used to be accepted,
so a plan could ask for `SECRET_KEY` and a pod could write it into an artifact. Now a pod
gets only names the owner put on the allowlist in Settings (names, never values), and
Sagan's own secrets can never be on it.
"""
from __future__ import annotations

import re

from config import Config
from services.core import settings
from services.core.errors import ValidationError
from services.core.redact import SECRET_ENV_SUFFIXES

SETTING = "pod_secret_allowlist"
NAME = re.compile(r"[A-Z][A-Z0-9_]{0,127}")
MAX_NAMES = 50

# Sagan's own namespaces: its settings, its provider and model credentials, its tests'.
RESERVED_PREFIXES = ("SAGAN_", "RUNPOD_", "ANTHROPIC_", "TEST_")
# Secrets config.py reads that no prefix above covers; plus every config name shaped like
# a secret (see _config_secret_names), so a setting added later is covered by itself.
RESERVED_NAMES = frozenset({"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PGPASSWORD"})


def _config_secret_names() -> frozenset[str]:
    return frozenset(name for name in dir(Config)
                     if name.isupper() and (name.endswith(SECRET_ENV_SUFFIXES) or name.endswith("_URL")))


def reserved(name: str) -> bool:
    """Is `name` one of Sagan's own secrets (never given to a pod)?"""
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES) or name in _config_secret_names()


def allowlist() -> list[str]:
    """The names the owner allows pods to receive, minus any reserved one."""
    return [name for name in settings.get(SETTING) or [] if isinstance(name, str) and not reserved(name)]


def clean_allowlist(raw: str) -> list[str]:
    """Names from the Settings form (commas, spaces or lines), checked; raises ValidationError."""
    names: list[str] = []
    for name in re.split(r"[\s,]+", raw or ""):
        if not name:
            continue
        if "=" in name:
            raise ValidationError("List names only (WANDB_API_KEY), never values; the value stays in "
                                  "the server's environment.", field="pod_secret_allowlist")
        if not NAME.fullmatch(name):
            raise ValidationError(f"{name[:40]!r} is not an environment variable name (capitals, digits "
                                  "and _; e.g. HF_TOKEN).", field="pod_secret_allowlist")
        if reserved(name):
            raise ValidationError(f"{name} is one of Sagan's own secrets and can never go to a pod.",
                                  field="pod_secret_allowlist")
        if name not in names:
            names.append(name)
    if len(names) > MAX_NAMES:
        raise ValidationError(f"At most {MAX_NAMES} names.", field="pod_secret_allowlist")
    return names


def update_allowlist(raw: str) -> None:
    """Store the allowlist from the Settings form; the caller commits."""
    settings.put(SETTING, clean_allowlist(raw))


def problems(requested, where: str, allowed: list[str]) -> list[str]:
    """Field-path problems for a pod's `secrets` list that asks for names not allowed."""
    found = []
    for index, name in enumerate(requested if isinstance(requested, list) else []):
        if not isinstance(name, str):
            continue
        if reserved(name):
            found.append(f"{where}.secrets[{index}]: {name} is one of Sagan's own secrets and never goes to a pod")
        elif name not in allowed:
            found.append(f"{where}.secrets[{index}]: {name} is not on the pod-secret allowlist "
                         "(the owner adds names in Settings → Pod secrets)")
    return found


def requested(spec) -> list[str]:
    """Every secret name a spec asks for, in order, once each (for the approval page)."""
    names: list[str] = []
    # One pod is an object, several an array (the spec's shape; dispatch/spec.py checks it).
    pods = [spec] if isinstance(spec, dict) else spec if isinstance(spec, list) else []
    for pod in pods:
        for name in (pod.get("secrets") if isinstance(pod, dict) else None) or []:
            if isinstance(name, str) and name not in names:
                names.append(name)
    return names


def for_pod(names) -> list[str]:
    """The requested names a pod may receive now (the allowlist can shrink after approval)."""
    allowed = set(allowlist())
    return [name for name in names or [] if name in allowed]
