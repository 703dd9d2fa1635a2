"""Every setting in one place, read from the environment.

Durations are seconds unless the name says otherwise; code reads the time through
services.core.clock, so tests shorten nothing here — they move the clock instead.
Owner-editable values (prices, caps, webhook) start from these defaults and can be
overridden in the Setting table through services.core.settings.
"""
from __future__ import annotations

import json
import os
import secrets
from datetime import timedelta
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
INSTANCE_DIR = Path(os.environ.get("SAGAN_INSTANCE_DIR", BASE_DIR / "instance"))
VERSION = "0.1.0"


def _env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one kept in instance/ so sessions survive restarts.

    Created with O_EXCL and mode 0600 in one step: never readable by others, and when
    several processes start at once they all end up reading the one that won.
    """
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = INSTANCE_DIR / "secret_key"
    INSTANCE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(48))
    return path.read_text().strip()


class Config:
    """Production / embedded configuration, from the environment."""

    TESTING = False
    VERSION = VERSION

    # --- storage -------------------------------------------------------------------
    SQLALCHEMY_DATABASE_URI = os.environ.get(
        "DATABASE_URL", f"sqlite:///{INSTANCE_DIR / 'sagan.db'}")
    REDIS_URL = os.environ.get("REDIS_URL", "")  # empty: the embedded launcher provides one
    SQLALCHEMY_ENGINE_OPTIONS: dict = {"pool_pre_ping": True}
    # PostgreSQL's statement_timeout on this process's connections, in seconds (0: none).
    # Only the web server sets it (serve.py, from WEB_STATEMENT_TIMEOUT_SECONDS): granian
    # has no request timeout, so a runaway statement would hold a request thread for ever.
    # Workers and migrations may legitimately run long statements and keep none.
    STATEMENT_TIMEOUT_SECONDS = 0
    WEB_STATEMENT_TIMEOUT_SECONDS = _env_int("SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS", 30)

    # --- web -----------------------------------------------------------------------
    SAGAN_BASE_URL = os.environ.get("SAGAN_BASE_URL", "http://127.0.0.1:5000")
    SESSION_COOKIE_HTTPONLY = True
    SESSION_COOKIE_SAMESITE = "Lax"
    SESSION_COOKIE_SECURE = SAGAN_BASE_URL.startswith("https://")
    REMEMBER_COOKIE_HTTPONLY = True
    REMEMBER_COOKIE_SECURE = SESSION_COOKIE_SECURE
    REMEMBER_COOKIE_SAMESITE = "Lax"  # "keep me logged in" is a session credential too (SPEC §10)
    # "Keep me signed in" lasts 30 days, not Flask-Login's default of 365.
    REMEMBER_COOKIE_DURATION = timedelta(days=30)
    # A board tab left open all day must still be able to post (SPEC §10).
    WTF_CSRF_TIME_LIMIT = _env_int("SAGAN_CSRF_TIME_LIMIT", 12 * 3600)
    WTF_CSRF_HEADERS = ["X-CSRFToken"]
    MAX_CONTENT_LENGTH = _env_int("SAGAN_MAX_REQUEST_BYTES", 2 * 1024 * 1024)
    # Threads of a web worker that may wait for a request body's bytes at once, in all and for
    # one client address (front/gate.py): a slow or stalled upload holds one of these, never
    # a thread that pages, polls and /healthz need.
    WEB_BODY_READERS = _env_int("SAGAN_WEB_BODY_READERS", 24)
    WEB_BODY_READERS_PER_CLIENT = _env_int("SAGAN_WEB_BODY_READERS_PER_CLIENT", 8)
    # Requests that run the app's code at once in a web worker; the web server sets it to its
    # threads (serve.py). 0: no limit (tests, the CLI).
    WEB_APP_SLOTS = 0
    # Reverse proxies whose X-Forwarded-For / -Proto are believed (services/core/trusted_proxies.py).
    SAGAN_TRUSTED_PROXIES = os.environ.get("SAGAN_TRUSTED_PROXIES", "")

    # --- owner account -------------------------------------------------------------
    SAGAN_OWNER_EMAIL = os.environ.get("SAGAN_OWNER_EMAIL", "")
    SAGAN_OWNER_PASSWORD = os.environ.get("SAGAN_OWNER_PASSWORD", "")
    LOGIN_MAX_FAILURES = _env_int("SAGAN_LOGIN_MAX_FAILURES", 5)
    LOGIN_FAILURE_WINDOW = _env_int("SAGAN_LOGIN_FAILURE_WINDOW", 60)
    # Bearer requests (API and pod tokens) with an unknown token, per address (SPEC §10).
    BEARER_MAX_FAILURES = _env_int("SAGAN_BEARER_MAX_FAILURES", 20)
    BEARER_FAILURE_WINDOW = _env_int("SAGAN_BEARER_FAILURE_WINDOW", 60)
    # Mentor share pages (/s/<token>) per address per minute, tokens guessed or real.
    SHARE_RATE_LIMIT = _env_int("SAGAN_SHARE_RATE_LIMIT", 60)

    # --- experiments ---------------------------------------------------------------
    SAGAN_FIRST_EXPERIMENT_NUMBER = _env_int("SAGAN_FIRST_EXPERIMENT_NUMBER", 1)
    # The account new experiments get; the setting's old name still works.
    SAGAN_DEFAULT_POD_ACCOUNT = (os.environ.get("SAGAN_DEFAULT_POD_ACCOUNT")
                                 or os.environ.get("SAGAN_DEFAULT_RUNPOD_ACCOUNT") or "local")
    TITLE_MAX = 300
    HYPOTHESIS_MAX = 50_000
    BODY_MAX = 200_000
    MARKDOWN_MAX = 200_000
    TAGS_MAX = 50
    TAG_MAX_CHARS = 80
    NOTE_MAX = 2_000
    EVENT_BODY_MAX = 64 * 1024
    TIMELINE_PAGE_SIZE = 50
    BOARD_DONE_LIMIT = _env_int("SAGAN_BOARD_DONE_LIMIT", 30)
    BOARD_ACTIVE_LIMIT = _env_int("SAGAN_BOARD_ACTIVE_LIMIT", 30)

    # --- live updates (SPEC §9.3) --------------------------------------------------
    POLL_RUN_SECONDS = _env_int("SAGAN_POLL_RUN_SECONDS", 2)
    POLL_BOARD_SECONDS = _env_int("SAGAN_POLL_BOARD_SECONDS", 5)
    # The experiment page: one conditional request per interval (304 while nothing changed).
    POLL_EXPERIMENT_SECONDS = _env_int("SAGAN_POLL_EXPERIMENT_SECONDS", 5)
    # Pods' progress posts alone refresh the experiment page at most this often (each poll
    # otherwise rendered every panel afresh: docs/performance.md); anything else at once. 0: at once.
    LIVE_PROGRESS_SECONDS = _env_int("SAGAN_LIVE_PROGRESS_SECONDS", 15)

    # --- workers and runs (SPEC §5, §7) --------------------------------------------
    HEARTBEAT_SECONDS = _env_int("SAGAN_HEARTBEAT_SECONDS", 30)
    RUN_STALE_SECONDS = _env_int("SAGAN_RUN_STALE_SECONDS", 300)
    SCHEDULER_TICK_SECONDS = _env_int("SAGAN_SCHEDULER_TICK_SECONDS", 15)
    # The owner's day (the daily log) begins and ends at midnight here; an IANA zone name.
    SAGAN_TIME_ZONE = os.environ.get("SAGAN_TIME_ZONE", "UTC")
    # --- email notifications (SPEC §12.5; Settings → Email overrides each) ----------
    SAGAN_SMTP_HOST = os.environ.get("SAGAN_SMTP_HOST", "")
    SAGAN_SMTP_PORT = _env_int("SAGAN_SMTP_PORT", 587)
    SAGAN_SMTP_SECURITY = os.environ.get("SAGAN_SMTP_SECURITY", "starttls")  # none, starttls or tls
    SAGAN_SMTP_USER = os.environ.get("SAGAN_SMTP_USER", "")
    SAGAN_SMTP_PASSWORD = os.environ.get("SAGAN_SMTP_PASSWORD", "")
    SAGAN_SMTP_FROM = os.environ.get("SAGAN_SMTP_FROM", "")
    SAGAN_NOTIFY_EMAIL = os.environ.get("SAGAN_NOTIFY_EMAIL", "")  # the owner's address: the only recipient
    # Seconds one SMTP connection may take (connect, each reply): a silent server fails the try, never hangs the queue.
    SMTP_TIMEOUT_SECONDS = _env_int("SAGAN_SMTP_TIMEOUT_SECONDS", 20)
    # Seconds before the 1st, 2nd, 3rd… retry of an email; after the last, it is shown failed on Settings.
    EMAIL_RETRY_SECONDS = [int(x) for x in os.environ.get("SAGAN_EMAIL_RETRY_SECONDS", "60,300,1800").split(",")]
    # At most one owner-turn email per this many minutes, with everything waiting (Settings can change it).
    SAGAN_OWNER_TURN_EMAIL_MINUTES = _env_int("SAGAN_OWNER_TURN_EMAIL_MINUTES", 30)
    # The weekly review is drafted on this day at this hour of SAGAN_TIME_ZONE (Settings override them).
    SAGAN_WEEKLY_REVIEW_DAY = os.environ.get("SAGAN_WEEKLY_REVIEW_DAY", "sunday").strip().lower()
    SAGAN_WEEKLY_REVIEW_HOUR = _env_int("SAGAN_WEEKLY_REVIEW_HOUR", 18)
    CANCEL_GRACE_SECONDS = _env_int("SAGAN_CANCEL_GRACE_SECONDS", 120)
    MODEL_MAX_RETRIES = _env_int("SAGAN_MODEL_MAX_RETRIES", 3)
    MODEL_TIMEOUT_SECONDS = _env_int("SAGAN_MODEL_TIMEOUT_SECONDS", 600)
    RECOVERY_MAX_PER_DAY = _env_int("SAGAN_RECOVERY_MAX_PER_DAY", 3)
    RECOVERY_BACKOFF_MINUTES = [int(x) for x in os.environ.get(
        "SAGAN_RECOVERY_BACKOFF_MINUTES", "1,5,15").split(",")]
    JOB_TIMEOUT_AGENTS = _env_int("SAGAN_JOB_TIMEOUT_AGENTS", 3600)
    JOB_TIMEOUT_DISPATCH = _env_int("SAGAN_JOB_TIMEOUT_DISPATCH", 1800)
    JOB_TIMEOUT_DEFAULT = _env_int("SAGAN_JOB_TIMEOUT_DEFAULT", 600)
    JOB_TIMEOUT_LOCAL = _env_int("SAGAN_JOB_TIMEOUT_LOCAL", 3600)
    # Redacting and sanitizing one large artifact (the `artifacts` queue): a job past this
    # is stopped and its artifact marked failed, with this limit as the reason.
    JOB_TIMEOUT_ARTIFACTS = _env_int("SAGAN_JOB_TIMEOUT_ARTIFACTS", 120)

    # --- agents --------------------------------------------------------------------
    ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
    ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
    SAGAN_AGENT_MODEL = os.environ.get("SAGAN_AGENT_MODEL", "")
    SAGAN_MODEL_PRICES = json.loads(os.environ.get("SAGAN_MODEL_PRICES") or "{}")
    # Tool results kept whole in an agent's context, in characters; older ones beyond it
    # are replaced by a one-line stub (docs/agent-loop.md).
    AGENT_TOOL_RESULT_BUDGET_CHARS = _env_int("SAGAN_AGENT_TOOL_RESULT_BUDGET_CHARS", 400_000)
    SAGAN_AUTO_APPROVE_MAX_USD = _env_float("SAGAN_AUTO_APPROVE_MAX_USD", 50.0)
    # Web searches (and, apart, fetches) one model call may make: the server tools'
    # max_uses (services/agents/web_tools.py). Searches cost $10 per 1,000.
    WEB_TOOLS_MAX_USES = _env_int("SAGAN_WEB_TOOLS_MAX_USES", 5)

    # --- the literature library (SPEC §11.3) ------------------------------------------
    # Metadata sources, by base URL (the tests point them at loopback fakes).
    SAGAN_ARXIV_API_URL = os.environ.get("SAGAN_ARXIV_API_URL", "https://export.arxiv.org/api/query")
    SAGAN_CROSSREF_API_URL = os.environ.get("SAGAN_CROSSREF_API_URL", "https://api.crossref.org")
    SAGAN_SEMANTIC_SCHOLAR_API_URL = os.environ.get("SAGAN_SEMANTIC_SCHOLAR_API_URL",
                                                    "https://api.semanticscholar.org/graph/v1")
    SAGAN_ZOTERO_API_URL = os.environ.get("SAGAN_ZOTERO_API_URL", "https://api.zotero.org")
    # The largest BibTeX upload (a library exported with its abstracts is several MB).
    LITERATURE_IMPORT_MAX_BYTES = _env_int("SAGAN_LITERATURE_IMPORT_MAX_BYTES", 20_000_000)
    # Minutes between two polls of one literature feed.
    LITERATURE_FEED_INTERVAL_MINUTES = _env_int("SAGAN_LITERATURE_FEED_INTERVAL_MINUTES", 360)

    # --- pods (SPEC §6) ------------------------------------------------------------
    RUNPOD_API_URL = os.environ.get("RUNPOD_API_URL", "https://api.runpod.io")  # REST v2
    RUNPOD_API_KEY_TEAM = os.environ.get("RUNPOD_API_KEY_TEAM", "")
    RUNPOD_TEAM_ID = os.environ.get("RUNPOD_TEAM_ID", "")
    RUNPOD_API_KEY_PERSONAL = os.environ.get("RUNPOD_API_KEY_PERSONAL", "")
    # REST v2 documents no team header (a team key is scoped to its team); set a header name
    # only if your account needs one. Sent with the team key only, never the personal one.
    RUNPOD_TEAM_HEADER = os.environ.get("RUNPOD_TEAM_HEADER", "")
    RUNPOD_USER_AGENT = os.environ.get("RUNPOD_USER_AGENT", "")  # empty: a browser-like default
    RUNPOD_TIMEOUT_SECONDS = _env_float("RUNPOD_TIMEOUT_SECONDS", 30.0)
    RUNPOD_MAX_RETRIES = _env_int("RUNPOD_MAX_RETRIES", 3)  # reads and actions; never create
    SAGAN_POD_IMAGE = os.environ.get(
        "SAGAN_POD_IMAGE", "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04")
    # The local backend runs pod commands on this host; off in production unless asked for
    # (`make run` asks for it). Tests (TESTING) may use it regardless.
    SAGAN_LOCAL_PODS = _env_bool("SAGAN_LOCAL_PODS", False)
    SAGAN_LOCAL_PODS_DIR = os.environ.get("SAGAN_LOCAL_PODS_DIR", str(INSTANCE_DIR / "local-pods"))
    # Local pods and sandboxed code run as two different dedicated users (created if missing
    # when Sagan is root), never the same one: see docs/security.md.
    SAGAN_LOCAL_POD_USER = os.environ.get("SAGAN_LOCAL_POD_USER", "sagan-pod")
    # Local pods reach nothing of this host (an nftables filter on the pod user, which needs
    # root and `nft`); where that cannot be set up they are refused, unless the owner opts in
    # here to pods that can reach every service on this host (docs/pods.md (Local pods)).
    SAGAN_LOCAL_PODS_UNISOLATED = _env_bool("SAGAN_LOCAL_PODS_UNISOLATED", False)
    SAGAN_LOCAL_POD_STOP_GRACE_SECONDS = _env_float("SAGAN_LOCAL_POD_STOP_GRACE_SECONDS", 10.0)
    POD_WATCH_SECONDS = _env_int("SAGAN_POD_WATCH_SECONDS", 30)
    POD_LISTING_LAG_SECONDS = _env_int("SAGAN_POD_LISTING_LAG_SECONDS", 30)
    POD_START_DEADLINE_SECONDS = _env_int("SAGAN_POD_START_DEADLINE_SECONDS", 20 * 60)
    POD_STALE_SECONDS = _env_int("SAGAN_POD_STALE_SECONDS", 30 * 60)
    POD_TOKEN_GRACE_SECONDS = _env_int("SAGAN_POD_TOKEN_GRACE_SECONDS", 15 * 60)
    POD_RETENTION_DAYS = _env_int("SAGAN_POD_RETENTION_DAYS", 7)
    ARTIFACT_MAX_BYTES = _env_int("SAGAN_ARTIFACT_MAX_BYTES", 20 * 1024 * 1024)
    # Budgets per pod and per experiment (all its pods and analyses), checked before an
    # upload's body is read; past one, the upload is a 413 naming it (docs/pods.md). An
    # experiment's artifacts must fit one analysis's inputs (1 GB), hence its size budget.
    ARTIFACT_POD_MAX_BYTES = _env_int("SAGAN_ARTIFACT_POD_MAX_BYTES", 200 * 1024 * 1024)
    ARTIFACT_POD_MAX_COUNT = _env_int("SAGAN_ARTIFACT_POD_MAX_COUNT", 1000)
    ARTIFACT_EXPERIMENT_MAX_BYTES = _env_int("SAGAN_ARTIFACT_EXPERIMENT_MAX_BYTES", 1024 * 1024 * 1024)
    ARTIFACT_EXPERIMENT_MAX_COUNT = _env_int("SAGAN_ARTIFACT_EXPERIMENT_MAX_COUNT", 5000)
    # SVG and HTML artifacts up to this size become figures (sanitized, about 0.2 MB/s);
    # larger ones are kept as files to download, not shown.
    FIGURE_MARKUP_MAX_BYTES = _env_int("SAGAN_FIGURE_MARKUP_MAX_BYTES", 2 * 1024 * 1024)

    # --- code-writing agents (SPEC §5.7): worktrees and the sandbox ------------------
    # Worktrees live on the host that serves the `local` queue; the folder must be
    # traversable (o+x) by SAGAN_SANDBOX_USER, who runs agent-written code and tests.
    SAGAN_WORKSPACES_DIR = os.environ.get("SAGAN_WORKSPACES_DIR", str(INSTANCE_DIR / "workspaces"))
    # `make demo` keeps the tiny research repository of its scripted code agents here.
    SAGAN_DEMO_REPO_DIR = os.environ.get("SAGAN_DEMO_REPO_DIR", str(INSTANCE_DIR / "demo-research"))
    SAGAN_WORKSPACE_LOCK_WAIT_SECONDS = _env_int("SAGAN_WORKSPACE_LOCK_WAIT_SECONDS", 60)
    SAGAN_SANDBOX_USER = os.environ.get("SAGAN_SANDBOX_USER", "sagan-sandbox")
    # Accounts <SAGAN_SANDBOX_USER>-1…N that analysis sandboxes take one each while they run,
    # so each has a process limit of its own (services/code/sandbox.py, "Accounts").
    SAGAN_SANDBOX_ACCOUNTS = _env_int("SAGAN_SANDBOX_ACCOUNTS", 8)
    SAGAN_SANDBOX_TIMEOUT_SECONDS = _env_int("SAGAN_SANDBOX_TIMEOUT_SECONDS", 600)
    SAGAN_SANDBOX_CPU_SECONDS = _env_int("SAGAN_SANDBOX_CPU_SECONDS", 600)
    SAGAN_SANDBOX_MEMORY_MB = _env_int("SAGAN_SANDBOX_MEMORY_MB", 4096)
    SAGAN_SANDBOX_OUTPUT_BYTES = _env_int("SAGAN_SANDBOX_OUTPUT_BYTES", 1024 * 1024)
    SAGAN_SANDBOX_TMP_MB = _env_int("SAGAN_SANDBOX_TMP_MB", 512)
    # What one sandboxed command may add to the worktree in total (files × RLIMIT_FSIZE is unbounded).
    SAGAN_SANDBOX_WORKTREE_WRITE_MB = _env_int("SAGAN_SANDBOX_WORKTREE_WRITE_MB", 1024)
    SAGAN_SANDBOX_COMMANDS = os.environ.get(
        "SAGAN_SANDBOX_COMMANDS",
        "python3,python,pytest,ruff,flake8,mypy,ls,cat,head,tail,wc,grep,diff,sort,uniq,echo,true,false")
    SAGAN_SANDBOX_READONLY_PATHS = os.environ.get("SAGAN_SANDBOX_READONLY_PATHS", "")
    # `run_analysis` (services/agents/analysis.py): Python with numpy, pandas, scipy and
    # matplotlib, built by scripts/analysis_env.py (`make run`, `make test`), mounted read-only.
    SAGAN_ANALYSIS_ENV = os.environ.get("SAGAN_ANALYSIS_ENV", str(INSTANCE_DIR / "analysis-env"))
    SAGAN_ANALYSIS_TIMEOUT_SECONDS = _env_int("SAGAN_ANALYSIS_TIMEOUT_SECONDS", 300)
    SAGAN_ANALYSIS_OUTPUT_MB = _env_int("SAGAN_ANALYSIS_OUTPUT_MB", 20)

    # --- outbound URLs -------------------------------------------------------------
    SAGAN_ALLOW_LOCAL_REPO = _env_bool("SAGAN_ALLOW_LOCAL_REPO", False)
    SAGAN_ALLOW_PRIVATE_URLS = _env_bool("SAGAN_ALLOW_PRIVATE_URLS", False)

    # --- demo ----------------------------------------------------------------------
    SAGAN_DEMO_AGENTS = _env_bool("SAGAN_DEMO_AGENTS", False)  # set by `make demo`: agents are scripted

    def __init__(self) -> None:
        # Read lazily so importing config never writes files.
        self.SECRET_KEY = _secret_key()


class TestConfig(Config):
    """Real PostgreSQL and Redis on 127.0.0.1 unless TEST_* says otherwise."""

    __test__ = False  # not a pytest test class, despite the name

    TESTING = True
    SQLALCHEMY_DATABASE_URI = os.environ.get(
        "TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    SAGAN_BASE_URL = "http://localhost"
    SESSION_COOKIE_SECURE = False
    SAGAN_ALLOW_LOCAL_REPO = True
    SAGAN_ALLOW_PRIVATE_URLS = True

    def __init__(self) -> None:
        self.SECRET_KEY = "test-secret-key-not-for-production"
