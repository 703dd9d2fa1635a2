"""Sagan's application factory: extensions, blueprints, CLI commands, error handlers."""
from __future__ import annotations

import logging

import sqlalchemy as sa
from flask import Flask

import cli
from blueprints import register_blueprints
from config import INSTANCE_DIR, Config
from extensions import csrf, htmx, login_manager, migrate
from front import lean_ingest, quiet_polls
from front.gate import RequestGate
from models import db
from services.agents import toolbox
from services.claude import model_api
from services.core.auth import load_user
from services.core.instance_security import refuse_open_redis
from services.core.trusted_proxies import TrustedProxyFix
from services.core.trusted_proxies import parse as parse_trusted_proxies
from services.day import daily_log, weekly_review
from services.pipeline import side_effects


def create_app(config: Config | type | None = None) -> Flask:
    """Build the app. `config` is a Config instance or class; default: from the environment."""
    app = Flask(__name__, instance_path=str(INSTANCE_DIR), instance_relative_config=False)
    if config is None:
        config = Config()
    elif isinstance(config, type):
        config = config()
    app.config.from_object(config)
    # A malformed price must stop start-up, not price every run at $0.00 (docs/agent-loop.md).
    model_api.validate_price_overrides(app.config.get("SAGAN_MODEL_PRICES") or {})
    # A misspelt time zone stops start-up rather than filing the daily log under wrong dates.
    daily_log.zone_named(app.config.get("SAGAN_TIME_ZONE"))
    # So does a weekly-review day or hour that is not one (the review would never be drafted).
    weekly_review.check_schedule_config(app.config)
    # An agent definition naming a tool no module defines stops start-up, with its file.
    toolbox.check_agent_definitions()
    # CSRF is checked by the access layer, which knows when a request carries a bearer
    # token instead of a session (blueprints/access.py); every other state change is checked.
    app.config["WTF_CSRF_CHECK_DEFAULT"] = False
    # The client's address, not the reverse proxy's, for rate limits (services/core/trusted_proxies.py).
    parse_trusted_proxies(app.config.get("SAGAN_TRUSTED_PROXIES") or "")  # a typo stops start-up, loudly
    # Local pods beside a Redis anyone can write to: refused, not warned about (docs/security.md).
    refuse_open_redis(app.config)

    _configure_statement_timeout(app)
    db.init_app(app)
    _configure_sqlite(app)
    migrate.init_app(app, db, directory="migrations", render_as_batch=True, compare_type=True)
    csrf.init_app(app)
    htmx.init_app(app)
    login_manager.init_app(app)
    login_manager.session_protection = "basic"

    login_manager.user_loader(load_user)

    register_blueprints(app)
    # The live polls' "nothing changed" and the pods' ordinary progress posts without Flask's
    # request machinery (docs/performance.md), inside the proxy fix so they see the client's
    # address as Flask does.
    quiet_polls.init_app(app)
    lean_ingest.init_app(app)
    # Outside both, so a slow body never holds a thread that runs the app (front/gate.py);
    # inside the proxy fix, so its per-client limit counts clients, not the proxy.
    app.wsgi_app = RequestGate.from_config(app.wsgi_app, app.config)
    app.wsgi_app = TrustedProxyFix(app.wsgi_app, app.config)

    cli.register(app)

    side_effects.install()

    if not app.testing:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return app


def _configure_statement_timeout(app: Flask) -> None:
    """PostgreSQL ends any statement of this process that runs longer than
    STATEMENT_TIMEOUT_SECONDS (set for the web server, serve.py): set when each connection
    opens, so it holds on every connection of the pool and of the lean reads alike."""
    seconds = app.config.get("STATEMENT_TIMEOUT_SECONDS") or 0
    if seconds < 0:
        raise ValueError(f"The statement timeout must be 0 (none) or a number of seconds, not {seconds}.")
    if not seconds or not app.config["SQLALCHEMY_DATABASE_URI"].startswith("postgresql"):
        return
    options = dict(app.config.get("SQLALCHEMY_ENGINE_OPTIONS") or {})
    connect_args = dict(options.get("connect_args") or {})
    connect_args["options"] = f"{connect_args.get('options', '')} -c statement_timeout={int(seconds * 1000)}".strip()
    options["connect_args"] = connect_args
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = options


def _configure_sqlite(app: Flask) -> None:
    """SQLite (embedded default): WAL so the web and the worker can write at once."""
    if not app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
        return
    with app.app_context():
        @sa.event.listens_for(db.engine, "connect")
        def _pragmas(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()
            # Let SQLAlchemy, not the driver, decide when transactions begin (below).
            dbapi_connection.isolation_level = None

        @sa.event.listens_for(db.engine, "begin")
        def _begin_immediate(conn):
            # Take the write lock when a transaction starts. A deferred transaction that read
            # first and writes later cannot wait for the lock once another process (the
            # worker, a heartbeat) committed in between: SQLite answers "database is locked"
            # at once. BEGIN IMMEDIATE waits (busy_timeout) instead.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
