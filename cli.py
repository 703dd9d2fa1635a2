"""`flask --app app …` commands: users, tokens, demo data."""
from __future__ import annotations

import click
from flask import Flask
from flask.cli import AppGroup

from models import db

users_cli = AppGroup("users", help="Owner accounts.")
tokens_cli = AppGroup("tokens", help="API tokens for scripts.")
demo_cli = AppGroup("demo", help="Demo and benchmark data.")
import_cli = AppGroup("import", help="Import experiments from other systems.")


@users_cli.command("create-owner")
@click.option("--email", required=True)
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True)
@click.option("--name", "display_name", default="")
def create_owner(email: str, password: str, display_name: str) -> None:
    """Create an owner account."""
    from services.core.auth import create_owner as create
    from services.core.errors import ValidationError
    try:
        user = create(email, password, display_name)
    except ValidationError as exc:
        raise click.ClickException(exc.message)
    db.session.commit()
    click.echo(f"Owner {user.email} created.")


@users_cli.command("ensure-owner")
def ensure_owner() -> None:
    """Create the first owner if none exists (from SAGAN_OWNER_EMAIL/PASSWORD, or generated)."""
    from services.core.auth import ensure_owner_from_env
    created = ensure_owner_from_env()
    if created is None:
        click.echo("An owner account already exists.")
        return
    user, generated = created
    if generated:
        click.echo(f"First-run owner created: {user.email} / password: {generated}")
        click.echo("This password is shown once; change it with `flask --app app users set-password`.")
    else:
        click.echo(f"First-run owner created: {user.email} (password from SAGAN_OWNER_PASSWORD)")


@users_cli.command("set-password")
@click.option("--email", required=True)
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True)
def set_password(email: str, password: str) -> None:
    """Change an owner's password (ends their sessions)."""
    from services.core.auth import set_password as change
    from services.core.errors import SaganError
    try:
        change(email, password)
    except SaganError as exc:
        raise click.ClickException(exc.message)
    db.session.commit()
    click.echo("Password changed; existing sessions are signed out.")


@tokens_cli.command("create")
@click.option("--name", required=True)
@click.option("--scopes", default="read", show_default=True, help="Comma-separated: read,write,dispatch,promote")
def create_token(name: str, scopes: str) -> None:
    """Create an API token and print its secret once."""
    from services.core.auth import create_token as create
    from services.core.errors import ValidationError
    try:
        token, secret = create(name, scopes)
    except ValidationError as exc:
        raise click.ClickException(exc.message)
    db.session.commit()
    click.echo(secret)
    click.echo(f"(token {token.prefix}… with scopes {','.join(token.scopes)}; the secret is not stored)",
               err=True)


@demo_cli.command("load")
@click.option("--scale", type=click.IntRange(0, 100_000), default=None,
              help="Generate N experiments with events (benchmarks) instead of the curated demo.")
@click.option("--seed", type=int, default=7, show_default=True)
def demo_load(scale: int | None, seed: int) -> None:
    """Load demo experiments in many statuses so the board looks alive."""
    from services.pipeline import demo
    if scale is None:
        count = demo.load_curated()
        demo.draft_weekly_review()
    else:
        count = demo.load_scale(scale, seed=seed)
    click.echo(f"Loaded {count} experiments.")


@import_cli.command("old-sagan")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def import_old_sagan(files: tuple[str, ...]) -> None:
    """Import experiment `view` documents exported from the old system's API."""
    import json

    from services.core.errors import ValidationError
    from services.planning.importer import ImportReport, import_document
    total = ImportReport()
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
            report = import_document(doc)
        except (ValueError, ValidationError) as exc:
            db.session.rollback()
            raise click.ClickException(f"{path}: {getattr(exc, 'message', exc)} (nothing imported from it)")
        db.session.commit()
        click.echo(f"{path}: {report.experiments_created} experiment(s) created, "
                   f"{report.experiments_skipped} already present, {report.events_created} event(s), "
                   f"{report.approvals_created} approval request(s)")
        for message in report.messages:  # what was kept, and what could not be (a project or belief not here)
            click.echo(f"  {message}")
        for field_name in ("experiments_created", "experiments_skipped", "events_created", "approvals_created"):
            setattr(total, field_name, getattr(total, field_name) + getattr(report, field_name))
    if len(files) > 1:
        click.echo(f"Total: {total.experiments_created} created, {total.events_created} events.")


@demo_cli.command("journey")
def demo_journey() -> None:
    """Create the "Demo journey" experiment that `make demo` walks through (once), and the tiny
    research repository its scripted code agents work on when this host can sandbox them —
    then also the second journey, whose crashed pods go back to the implementer."""
    from services.code import demo_repo
    from services.pipeline import demo
    number = demo.ensure_journey_experiment()
    stage = demo_repo.ensure()
    db.session.commit()
    click.echo(f"Demo journey experiment: #{number}")
    if stage.on:
        click.echo(f"Demo crash-and-fix experiment: #{demo.ensure_short_run_experiment()}")
    click.echo(stage.line())


def register(app: Flask) -> None:
    for group in (users_cli, tokens_cli, demo_cli, import_cli):
        app.cli.add_command(group)
