"""Owner-editable settings: stored in the Setting table, defaults from config.py."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from flask import current_app

from models import Setting, db
from services.core.errors import ValidationError
from services.core.outbound import check_host, check_outbound_url

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

# key → config name holding the default
EDITABLE = {
    "auto_approve_max_usd": "SAGAN_AUTO_APPROVE_MAX_USD",
    "pod_secret_allowlist": None,  # names of server env vars pods may receive (services/dispatch/pod_secrets.py)
    "gpu_prices": None,  # {short name: USD per GPU-hour}; catalogue reference rates otherwise
    "webhook_url": None,  # Slack-compatible incoming webhook for owner-turn notifications
    "daily_cap_usd": None,  # optional spend cap across all experiments per UTC day (off by default)
    "research_repo_url": None,  # the git repository pods check out (SPEC §6.11)
    "research_repo_branch": None,
    "research_repo_test_command": None,
    "research_repo_lint_command": None,
    "research_repo_dir": None,  # folder under /workspace pods clone into (default: the URL's name)
    "research_repo_token_env": None,  # NAME of Sagan's env var holding an HTTPS deploy token
    "research_repo_ssh_key_env": None,  # NAME of Sagan's env var holding an SSH deploy key
    "web_tools_enabled": None,  # web search/fetch offered to the agents that list them (on when unset)
    "runpod_ssh_keys": None,  # {account: {"keys": [public key lines], "registered_at"}} (services/dispatch/ssh_keys.py)
    "web_allowed_domains": None,
    "zotero_library_type": None,  # "user" or "group" (services/research/zotero.py)
    "zotero_library_id": None,
    # Email notifications (services/workflow/email_settings.py); the environment gives the defaults.
    "smtp_host": "SAGAN_SMTP_HOST",
    "smtp_port": "SAGAN_SMTP_PORT",
    "smtp_security": "SAGAN_SMTP_SECURITY",
    "smtp_user": "SAGAN_SMTP_USER",
    "smtp_password": "SAGAN_SMTP_PASSWORD",  # a secret: stored, never shown back on any page
    "smtp_from": "SAGAN_SMTP_FROM",
    "notify_email": "SAGAN_NOTIFY_EMAIL",  # the owner's address: the only recipient ever
    "email_kinds": None,  # {kind: on}; every kind on when unset
    "quiet_hours": None,  # {"start": "22:00", "end": "07:00"} in SAGAN_TIME_ZONE
    "owner_turn_email_minutes": "SAGAN_OWNER_TURN_EMAIL_MINUTES",
    "weekly_review_day": "SAGAN_WEEKLY_REVIEW_DAY",  # the day the weekly review is drafted (services/day/weekly_review.py)
    "weekly_review_hour": "SAGAN_WEEKLY_REVIEW_HOUR",  # its hour, 0–23, in SAGAN_TIME_ZONE
    "zotero_api_key": None,  # a secret: stored, never shown back on any page  # [domain, …] the web tools may reach; empty: any (services/agents/web_tools.py)
}

# Sagan's own secrets: never handed to a pod, whatever a setting names.
OWN_SECRET_PREFIXES = ("SECRET_KEY", "DATABASE_URL", "TEST_DATABASE_URL", "REDIS_URL", "RUNPOD_",
                       "ANTHROPIC_", "SAGAN_")


def update_webhook(url: str) -> None:
    """Set (or clear, with an empty value) the owner-turn webhook; https and public only."""
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


# ssh URLs as git reads them: ssh://[user@]host[:port]/path, or scp-style [user@]host:path.
# No part may start with "-": git hands the host (and user) to ssh as an argument, and
# "-oProxyCommand=…" there is a command Sagan's user would run.
_SSH_URL = re.compile(r"ssh://(?:(?P<user>[\w.-]+)@)?(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?"
                      r"/(?P<path>[\w./~-]+)")
_SCP_URL = re.compile(r"(?:(?P<user>[\w.-]+)@)?(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(?P<path>[\w./~-]+)")


def check_repo_url(url: str) -> str:
    """The research repository (SPEC §6.11): https or ssh only, to a public host; a local
    path or file:// only with SAGAN_ALLOW_LOCAL_REPO=1 (tests use a local git fixture)."""
    url = (url or "").strip()
    if not url:
        raise ValidationError("Give the repository's git URL.", field="research_repo_url")
    if url.startswith("file://") or url.startswith("/"):
        if current_app.config.get("SAGAN_ALLOW_LOCAL_REPO"):
            return url
        raise ValidationError("A local repository path needs SAGAN_ALLOW_LOCAL_REPO=1; use an https or ssh URL.",
                              field="research_repo_url")
    if url.startswith("http://") and current_app.config.get("SAGAN_ALLOW_LOCAL_REPO") \
            and urlsplit(url).hostname in LOOPBACK_HOSTS:
        return url  # a repository served on this machine (the tests' git server): local, like a path
    if url.startswith("https://"):
        try:
            return check_outbound_url(url)
        except ValidationError as exc:
            raise ValidationError(exc.message, field="research_repo_url") from None
    match = _SSH_URL.fullmatch(url) or (None if "://" in url else _SCP_URL.fullmatch(url))
    if match is None:
        raise ValidationError("The repository URL must be https://… or ssh (git@host:org/repo.git or "
                              "ssh://git@host/org/repo.git).", field="research_repo_url")
    for part in ("user", "host", "path"):
        if (match.group(part) or "").startswith("-"):
            raise ValidationError(f"The repository URL's {part} starts with '-', which ssh would read as an "
                                  "option (e.g. -oProxyCommand=…); refused.", field="research_repo_url")
    if match.groupdict().get("port") and not 0 < int(match.group("port")) < 65536:
        raise ValidationError("The repository URL's port must be between 1 and 65535.", field="research_repo_url")
    check_host(match.group("host"), field="research_repo_url")  # the same public-host rule as https
    return url


def update_research_repo(form: dict) -> None:
    """Store the research repository settings after checking them; the caller commits."""
    url = check_repo_url(form.get("research_repo_url", ""))
    branch = (form.get("research_repo_branch") or "main").strip()
    if not re.fullmatch(r"[A-Za-z0-9._/-]{1,200}", branch) or ".." in branch or branch.startswith(("-", "/")):
        raise ValidationError("The default branch is not a valid git branch name.", field="research_repo_branch")
    commands = {}
    for name in ("research_repo_test_command", "research_repo_lint_command"):
        value = (form.get(name) or "").strip()
        if len(value) > 500 or "\n" in value:
            raise ValidationError("A command is one line of at most 500 characters.", field=name)
        commands[name] = value or None
    folder = (form.get("research_repo_dir") or "").strip() or None
    if folder is not None and (not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", folder) or folder in (".", "..", ".sagan")):
        raise ValidationError("The checkout folder is one name of letters, digits, '.', '_' or '-' "
                              "(pods clone into /workspace/<folder>).", field="research_repo_dir")
    credentials = {}
    for name in ("research_repo_token_env", "research_repo_ssh_key_env"):
        value = (form.get(name) or "").strip() or None
        if value is not None:
            if not re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", value):
                raise ValidationError("Give the name of an environment variable (like RESEARCH_REPO_TOKEN), "
                                      "not its value.", field=name)
            if value.startswith(OWN_SECRET_PREFIXES):
                raise ValidationError(f"{value} is one of Sagan's own settings and is never given to a pod.",
                                      field=name)
        credentials[name] = value
    put("research_repo_url", url)
    put("research_repo_branch", branch)
    put("research_repo_dir", folder)
    for name, value in {**commands, **credentials}.items():
        put(name, value)


REPO_KEYS = ("research_repo_url", "research_repo_branch", "research_repo_test_command", "research_repo_lint_command",
             "research_repo_dir", "research_repo_token_env", "research_repo_ssh_key_env")


def clear_research_repo(confirm: str | None) -> None:
    """Forget the research repository (URL, branch, commands) once the owner confirmed it;
    the caller commits. Worktrees already made stay on disk until their experiments close."""
    if confirm != "yes":
        raise ValidationError("Tick the box to confirm: code agents and pods will stop using the repository.",
                              field="confirm")
    for key in REPO_KEYS:
        put(key, None)
