"""Alembic environment: runs migrations with the app's own engine and metadata."""
import logging
from logging.config import fileConfig

from alembic import context
from flask import current_app

config = context.config
if config.config_file_name and not logging.getLogger().handlers:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

db = current_app.extensions["migrate"].db
config.set_main_option("sqlalchemy.url",
                       db.engine.url.render_as_string(hide_password=False).replace("%", "%%"))


def run_migrations_offline() -> None:
    """Emit SQL to stdout (`flask db upgrade --sql`)."""
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=db.metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    def skip_empty(context_, revision, directives):
        # `flask db migrate` with no model change should not write an empty revision.
        if getattr(config.cmd_opts, "autogenerate", False) and directives[0].upgrade_ops.is_empty():
            directives[:] = []

    conf_args = dict(current_app.extensions["migrate"].configure_args)
    conf_args.setdefault("process_revision_directives", skip_empty)
    with db.engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # Batch mode rebuilds a SQLite table by copying it and dropping the old one, and
            # with foreign keys on, that DROP deletes every row that points at the table (a
            # cascade through pods, progress posts and metric chunks). Off for the migration;
            # it must be set outside a transaction, on the driver's connection, before
            # SQLAlchemy begins one. The app turns it on for each connection it opens.
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        context.configure(connection=connection, target_metadata=db.metadata, **conf_args)
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"The migration left rows whose foreign keys point nowhere: {broken[:5]}")
        if sqlite:
            connection.invalidate()  # never back to the pool with foreign keys off


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
