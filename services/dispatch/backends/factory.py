"""Which backend serves a pod account, configured from the app's settings.

The account's entry (services/core/pod_accounts.py) names its backend, and each backend
module registers a builder under that name (`base.registers_backend`). Kept apart from `base`
(the interface every backend implements) so that the interface knows no backend and each
backend module imports only the interface.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from flask import current_app

from config import Config
from services.core import pod_accounts
from services.dispatch.backends.base import BUILDERS, BackendError, PodBackend


def _current_config():
    try:
        return current_app.config
    except RuntimeError:  # no app context: the environment, as config.py reads it
        return Config  # the class: reading its attributes never creates the secret key file


@cache
def _load_backend_modules() -> None:
    """Import every module of this package once, so each backend has registered itself.

    A scan rather than a list of imports: a new provider's module needs no line here. Lazy
    (at the first lookup), because backend modules import this package while it loads."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{module.name}")


def backend_for(account: str, config=None) -> PodBackend:
    """The backend serving `account` (its entry in services/core/pod_accounts.py names it),
    configured from `config` (default: the current app's config, else the environment)."""
    config = _current_config() if config is None else config
    entry = pod_accounts.get(account)
    if entry is None:
        raise BackendError("spec_invalid", f"Unknown pod account {account!r}; "
                                           f"known: {', '.join(pod_accounts.names())}.")
    _load_backend_modules()
    builder = BUILDERS.get(entry.backend)
    if builder is None:  # a table entry whose backend module is missing: a deployment mistake
        raise BackendError("spec_invalid", f"The {account} account's backend {entry.backend!r} is not "
                                           "installed on this server.")
    return builder(entry, config)
