"""Start-up checks of the pod accounts: what scope each RunPod key reaches, said plainly.

RunPod's v2 API scopes a key to the account (or team) it was made in and documents no team
header, and a key in the wrong scope does not fail: it lists zero pods. So at start-up the
worker makes one list call per configured account and logs what it saw, and the scoping in
use (which key, which header if any) is written down where the owner looks.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from services.core import pod_accounts
from services.dispatch.backends import BackendError, backend_for

log = logging.getLogger(__name__)


def keys() -> dict[str, str]:
    """Account → the setting holding its API key, for every account whose backend takes one
    (the pod-accounts table names it)."""
    return {name: account.settings["api_key"] for name, account in pod_accounts.ACCOUNTS.items()
            if "api_key" in account.settings}


@dataclass
class AccountCheck:
    account: str
    ok: bool
    summary: str


def scoping(config, account: str) -> str:
    """How the account is scoped: its key, and the team header if one is configured."""
    header = (config.get("RUNPOD_TEAM_HEADER") or "").strip()
    team_id_setting = pod_accounts.get(account).settings.get("team_id")
    team_id = (config.get(team_id_setting) or "") if team_id_setting else ""
    if header and team_id:
        return f"{keys()[account]} with header {header}: {team_id}"
    return f"{keys()[account]} only (the key's own scope; no team header)"


def scopes(config) -> list[tuple[str, str]]:
    """(account, how it is scoped) for the Settings page; "not configured" without a key."""
    return [(account, scoping(config, account) if (config.get(key) or "").strip() else f"not configured ({key} unset)")
            for account, key in keys().items()]


def check_runpod_accounts(config) -> list[AccountCheck]:
    """One list call per RunPod account with a key; logged, and returned for the caller."""
    results = []
    for account, key in keys().items():
        if not (config.get(key) or "").strip():
            continue
        try:
            pods = backend_for(account, config).list_all("")
        except BackendError as exc:
            check = AccountCheck(account, False, f"{account}: {scoping(config, account)} — the list call failed: "
                                                 f"{exc.message}")
            log.warning("RunPod account check: %s", check.summary)
        else:
            mine = sum(1 for p in pods if p.name.startswith("sagan-"))
            check = AccountCheck(account, True, f"{account}: {scoping(config, account)} — lists {len(pods)} "
                                                f"pod(s), {mine} of them Sagan's")
            log.info("RunPod account check: %s", check.summary)
        results.append(check)
    return results
