"""Which backend serves a pod account, configured from the app's settings.

Kept apart from `base` (the interface every backend implements) so that the interface knows
no backend and each backend module imports only the interface.
"""
from __future__ import annotations

import os
from functools import lru_cache

from flask import current_app

from config import INSTANCE_DIR, Config
from services.dispatch import pod_accounts
from services.dispatch.backends.base import ACCOUNTS, BackendError, PodBackend
from services.dispatch.backends.local import LocalBackend
from services.dispatch.backends.runpod import RunPodBackend


def _setting(config, name: str, default=None):
    """A setting from a Flask config (a dict), a Config class or instance."""
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def _current_config():
    try:
        return current_app.config
    except RuntimeError:  # no app context: the environment, as config.py reads it
        return Config  # the class: reading its attributes never creates the secret key file


def local_pods_allowed(config=None) -> bool:
    """The local backend runs code on this host: only when SAGAN_LOCAL_PODS is on (the
    embedded `make run` turns it on) or under tests."""
    config = _current_config() if config is None else config
    return bool(_setting(config, "SAGAN_LOCAL_PODS", False) or _setting(config, "TESTING", False))


@lru_cache(maxsize=16)
def _runpod_backend(pid: int, account: str, api_key: str, url: str, team_id: str | None, team_header: str,
                    user_agent: str, timeout: float, max_retries: int) -> PodBackend:
    """One RunPod backend per process and configuration, so its HTTP client (and its kept-alive
    connections) serves every watcher pass and dispatch instead of a new client per call that
    is never closed. Keyed by the process id: a forked job never shares its parent's sockets."""
    return RunPodBackend(account, api_key, url, team_id=team_id, team_header=team_header, user_agent=user_agent,
                         timeout=timeout, max_retries=max_retries)


def backend_for(account: str, config=None) -> PodBackend:
    """The backend serving `account` (its entry in services/dispatch/pod_accounts.py names it),
    configured from `config` (default: the current app's config, else the environment)."""
    config = _current_config() if config is None else config
    entry = pod_accounts.get(account)
    if entry is None:
        raise BackendError("spec_invalid", f"Unknown pod account {account!r}; known: {', '.join(ACCOUNTS)}.")
    if entry.backend == "runpod":
        key_name = "RUNPOD_API_KEY_TEAM" if account == "team" else "RUNPOD_API_KEY_PERSONAL"
        api_key = _setting(config, key_name, "") or ""
        if not api_key.strip():
            raise BackendError("provider_auth", f"No RunPod API key is configured for the {account} "
                                                f"account: set {key_name}.")
        return _runpod_backend(
            os.getpid(), account, api_key.strip(), _setting(config, "RUNPOD_API_URL", "https://api.runpod.io"),
            # The team id goes only with the team key; RunPod rejects it on personal keys.
            (_setting(config, "RUNPOD_TEAM_ID", "") or None) if account == "team" else None,
            (_setting(config, "RUNPOD_TEAM_HEADER", "") or "").strip(),
            _setting(config, "RUNPOD_USER_AGENT", "") or "",
            float(_setting(config, "RUNPOD_TIMEOUT_SECONDS", 30) or 30),
            int(_setting(config, "RUNPOD_MAX_RETRIES", 3) or 0),
        )
    if entry.backend == "local":
        if not local_pods_allowed(config):
            raise BackendError("spec_invalid", "The local pod backend is off on this server: it runs "
                                               "pod commands on the Sagan host. Set SAGAN_LOCAL_PODS=1 "
                                               "to enable it, or choose the team or personal account.")
        return LocalBackend(
            _setting(config, "SAGAN_LOCAL_PODS_DIR", None) or INSTANCE_DIR / "local-pods",
            run_as=_setting(config, "SAGAN_LOCAL_POD_USER", "sagan-pod") or "sagan-pod",
            stop_grace_seconds=float(_setting(config, "SAGAN_LOCAL_POD_STOP_GRACE_SECONDS", 10)),
            sandbox_user=_setting(config, "SAGAN_SANDBOX_USER", "sagan-sandbox") or "sagan-sandbox",
            unisolated=bool(_setting(config, "SAGAN_LOCAL_PODS_UNISOLATED", False)),
        )
    raise BackendError("spec_invalid", f"Unknown pod account {account!r}; known: {', '.join(ACCOUNTS)}.")
