"""``platform-svc``'s commands for who may call: accounts, their API keys and rate limits, and the
console's operators (:mod:`platform_svc.cli` adds them to its group)."""
from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import click

from platform_svc import MAX_RATE_LIMIT
from shared import config
from shared.cli import fail_fast, quiet_on_closed_pipe


def _platform_database():
    from shared.db import Database

    return Database(config.database_url("PLATFORM_DATABASE_URL"), pool_size=1)


def _rate_limit_option(help_text: str):
    return click.option("--rate-limit", type=click.IntRange(1, MAX_RATE_LIMIT), default=None, help=help_text)


@click.command("create-account", help="Create an account and print its id and API key (shown only once).")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help='Print {"account_id": ..., "api_key": ...}.')
@_rate_limit_option("Its own limit, in public requests per second (default: ACCOUNT_RATE_LIMIT, 100).")
@fail_fast
def create_account(name: str, as_json: bool, rate_limit: int | None) -> None:
    from platform_svc.api import services

    name = name.strip()
    if not 1 <= len(name) <= 100:
        raise click.BadParameter("must be 1 to 100 characters", param_hint="NAME")
    with _platform_database().begin() as db_session:
        account_id, api_key = services.create_account(db_session=db_session, name=name, rate_limit=rate_limit)
    _print_secret({"account_id": str(account_id), "api_key": api_key}, as_json)


@click.command("create-key", help="Issue another API key for an account (its other keys keep working); shown once.")
@click.argument("account_id", metavar="ACCOUNT_ID", type=click.UUID)
@click.option("--json", "as_json", is_flag=True, help='Print {"account_id": ..., "key_id": ..., "api_key": ...}.')
@fail_fast
def create_key(account_id: uuid.UUID, as_json: bool) -> None:
    from platform_svc.api import auth

    try:
        with _platform_database().begin() as db_session:
            api_key = auth.issue_key(db_session=db_session, account_id=account_id)
    except LookupError:
        click.echo(f"platform-svc create-key: no account {account_id}", err=True)
        sys.exit(1)
    key_id = api_key.partition(".")[0]
    _print_secret({"key_id": key_id, "api_key": api_key, "account_id": str(account_id)}, as_json)


def _print_secret(fields: dict[str, str], as_json: bool) -> None:
    """Print what a command issued, its secret among it, once: one JSON object, or aligned lines
    and the warning that the secret is not shown again."""
    if as_json:
        click.echo(json.dumps(fields))
        return
    width = max(map(len, fields)) + 1
    for name, value in fields.items():
        click.echo(f"{name + ':':<{width}} {value}")
    click.echo("(store the key now: it is not shown again)")


@click.command("list-keys", help="List an account's API keys: id, created, last used (to the minute), revoked.")
@click.argument("account_id", metavar="ACCOUNT_ID", type=click.UUID)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array of keys.")
@fail_fast
@quiet_on_closed_pipe
def list_keys(account_id: uuid.UUID, as_json: bool) -> None:
    from platform_svc.api import auth

    with _platform_database().engine.connect() as db_session:
        keys = auth.list_keys(db_session=db_session, account_id=account_id)
    if as_json:
        click.echo(json.dumps([
            {"key_id": key.key_id, **{name: _iso(getattr(key, name)) for name in ("created_at", "last_used_at", "revoked_at")}}
            for key in keys
        ]))
        return
    if not keys:
        click.echo(f"no keys for account {account_id}")
    for key in keys:
        used = f"last used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M:%S}" if key.revoked_at else "active"
        click.echo(f"{key.key_id}  created {key.created_at:%Y-%m-%d %H:%M:%S}  {used}  {state}")


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


@click.command("revoke-key", help="Revoke an API key (the part before the dot): it answers 401 from now on, everywhere.")
@click.argument("key_id")
@fail_fast
def revoke_key(key_id: str) -> None:
    from platform_svc.api import auth

    with _platform_database().begin() as db_session:
        revoked = auth.revoke_key(db_session=db_session, key_id=key_id.strip())
    if revoked is None:
        click.echo(f"platform-svc revoke-key: no key {key_id}", err=True)
        sys.exit(1)
    click.echo(f"revoked {key_id} of account {revoked.account_id} at {revoked.revoked_at:%Y-%m-%d %H:%M:%S%z}")


@click.command("set-rate-limit", help="Set an account's limit in public requests per second, or 'default' for ACCOUNT_RATE_LIMIT.")
@click.argument("account_id", metavar="ACCOUNT_ID", type=click.UUID)
@click.argument("limit", metavar="LIMIT|default")
@fail_fast
def set_rate_limit(account_id: uuid.UUID, limit: str) -> None:
    from platform_svc.api import auth

    value = None if limit.strip().lower() == "default" else click.IntRange(1, MAX_RATE_LIMIT).convert(
        limit, None, click.get_current_context()
    )
    with _platform_database().begin() as db_session:
        found = auth.set_rate_limit(db_session=db_session, account_id=account_id, limit=value)
    if not found:
        click.echo(f"platform-svc set-rate-limit: no account {account_id}", err=True)
        sys.exit(1)
    click.echo(f"account {account_id}: {'the default limit' if value is None else f'{value} requests per second'}")


@click.command(
    "create-operator",
    help="Create a console operator, or give an existing one a new secret (ending its sessions); print the"
    " secret (shown only once).",
)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help='Print {"operator": ..., "secret": ...}.')
@fail_fast
def create_operator(name: str, as_json: bool) -> None:
    from platform_svc.console.auth import create_operator as create
    from shared.db import Database

    name = name.strip()
    if not 1 <= len(name) <= 100:
        raise click.BadParameter("must be 1 to 100 characters", param_hint="NAME")
    database = Database(config.database_url("PLATFORM_DATABASE_URL"), pool_size=1)
    with database.begin() as db_session:
        secret = create(db_session=db_session, name=name)
    if as_json:
        click.echo(json.dumps({"operator": name, "secret": secret}))
    else:
        click.echo(
            f"operator: {name}\nsecret:   {secret}\n(store the secret now: it is not shown again;"
            " log in at /console/login)"
        )


@click.command("revoke-operator", help="Remove a console operator; its sessions end at once.")
@click.argument("name")
@fail_fast
def revoke_operator(name: str) -> None:
    from platform_svc.console.auth import revoke_operator as revoke
    from shared.db import Database

    database = Database(config.database_url("PLATFORM_DATABASE_URL"), pool_size=1)
    with database.begin() as db_session:
        if not revoke(db_session=db_session, name=name.strip()):
            click.echo(f"platform-svc revoke-operator: no operator is called {name.strip()!r}", err=True)
            sys.exit(1)
    click.echo(f"operator {name.strip()} revoked")


COMMANDS = [create_account, create_key, list_keys, revoke_key, set_rate_limit, create_operator, revoke_operator]
