"""``platform-svc``: serve, migrate, reconcile, repair, purge, sync-status, abandon and drill; the
commands for accounts, their keys and limits, and the console's operators are
:mod:`platform_svc.credentials_cli`'s."""
from __future__ import annotations

import getpass
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from idempotent_pair_client.transport import ClientPolicy

from platform_svc import Settings, create_app, credentials_cli
from platform_svc.models import RESOURCES
from platform_svc.operations.passes import record_pass, this_process
from platform_svc.operations.purge import purger
from platform_svc.reconciler.settings import ReconcilerSettings
from platform_svc.states import LISTED
from shared import config
from shared.cli import add_purge_command, fail_fast, quiet_on_closed_pipe, service_group

MIGRATIONS = Path(__file__).with_name("migrations")


main = service_group(
    "platform_svc: the public API; assigns every ID and pushes objects down to cluster_svc.",
    name="platform-svc", default_port=8000, database_setting="PLATFORM_DATABASE_URL", migrations=MIGRATIONS,
    load_settings=Settings.from_env, create_app=create_app,
)
for command in credentials_cli.COMMANDS:  # accounts, keys, rate limits and operators
    main.add_command(command)

DEFAULTS = ReconcilerSettings()
_BY_NAME = {name: r for r in RESOURCES for name in (r.segment, r.plural)}  # firewall-rules (paths), firewall_rules
_RESOURCE_NAMES = click.Choice(sorted(_BY_NAME))


def _pass_interval(option: str, default: float, passes: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``reconcile``'s option for the seconds between one kind of periodic ``passes``."""
    return click.option(
        option,
        default=default,
        show_default=True,
        type=click.FloatRange(min=0),
        help=f"Seconds between {passes}; 0 turns them off.",
    )


@main.command(help="Push every row cluster_svc has not confirmed, until stopped.")
@click.option("--once", is_flag=True, help="Drain what is due now and exit: 0, or 1 when rows are left failed.")
@click.option(
    "--concurrency", default=DEFAULTS.concurrency, show_default=True, type=click.IntRange(1, 64),
    help="Calls in flight.",
)
@click.option(
    "--batch", default=DEFAULTS.batch, show_default=True, type=click.IntRange(1, 1000),
    help="Creates one batch call sends at most.",
)
@click.option(
    "--max-backoff",
    default=DEFAULTS.max_backoff,
    show_default=True,
    type=click.FloatRange(0.05),
    help="Longest wait (seconds) before retrying a row after transient failures; they are retried for ever.",
)
@click.option(
    "--push-timeout",
    default=DEFAULTS.push_timeout,
    show_default=True,
    type=click.FloatRange(0.1, 300),
    help="Seconds to wait for cluster_svc's answer to one call (the row lease is derived from it).",
)
@_pass_interval("--repair-interval", DEFAULTS.repair_interval, "drift repair passes (as `platform-svc repair`)")
@_pass_interval(
    "--purge-interval", DEFAULTS.purge_interval, "purge passes (as `platform-svc purge`) by the reconciler that leads"
)
@click.option(
    "--leader-lease",
    default=DEFAULTS.leader_lease,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    help="Seconds the lease that makes one reconciler the one running the periodic passes lasts unless renewed"
    " (every third of it); a leader that crashes is replaced within this time.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics (sync_pushes_total, ...) on this port at HOST (default 127.0.0.1); off if not given.",
)
@fail_fast
def reconcile(once: bool, **options: Any) -> None:
    # Imported here: the other commands start without the reconciler's machinery.
    from platform_svc.reconciler.manager import ReconcilerProcess

    # Every other option is a field of ReconcilerSettings, by the same name.
    process = ReconcilerProcess.from_options(**options)
    if once:
        sys.exit(process.drain())
    process.run()


@main.command(help="Compare every object with cluster_svc's copy once and put back in line what drifted.")
@click.option("--dry-run", is_flag=True, help="Report what drifted; change nothing.")
@click.option(
    "--page-size", default=500, show_default=True, type=click.IntRange(1, 500), help="Rows compared per step."
)
@fail_fast
def repair(dry_run: bool, page_size: int) -> None:
    from sqlalchemy.exc import OperationalError

    from platform_svc.operations.copies import RepairError
    from platform_svc.operations.repair import Repairer

    settings = Settings.from_env()
    repairer = Repairer(settings.database(), settings.client(ClientPolicy(pool_size=1)), page_size=page_size,
                        horizon=settings.horizon)
    try:
        report = repairer.run(dry_run=dry_run, on_finding=_echo_while_read)
    except (RepairError, OperationalError) as exc:
        click.echo(f"platform-svc repair: stopped: {str(exc).splitlines()[0]}", err=True)
        sys.exit(1)
    _echo_while_read(report.summary(dry_run=dry_run))
    record_pass(repairer.database, "repair", f"{this_process()} (CLI)", report.summary(dry_run=dry_run))


def _retry_failed(
    database: Any, resource_name: str | None, reason: str | None, object_id: uuid.UUID | None
) -> dict[Any, list[Any]]:
    """``--retry-failed``: every resource's outcomes (platform_svc.operations.retry), by resource."""

    from platform_svc.operations.retry import retry_failed

    resource, client = _BY_NAME.get(resource_name or ""), Settings.from_env().client(ClientPolicy(pool_size=1))
    try:
        outcomes = retry_failed(database, client, resource=resource, reason=reason, object_id=object_id)
    finally:
        client.close()
    return {r: [o for o in outcomes if o.resource is r] for r in RESOURCES if resource is None or r is resource
            or (object_id is not None and r in resource.descendants)}


def _echo_while_read(line: object) -> None:
    """Print a line; once the reader has gone (``| head``), stop printing but carry on.

    Each finding is printed after its change is committed, so a closed pipe
    loses nothing but the rest of the report.
    """
    try:
        click.echo(str(line))
    except BrokenPipeError:
        # Later writes, and the flush at exit, go nowhere instead of failing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


add_purge_command(
    main, help="Remove deleted rows whose delete cluster_svc confirmed and whose ID is past the horizon.",
    database_setting="PLATFORM_DATABASE_URL", rows="Deleted rows", purger=purger,
    recorded=lambda database, summary: record_pass(database, "purge", f"{this_process()} (CLI)", summary),
)


@main.command(help="Close a failed row whose ID cluster_svc holds for another's object: deleted here, never pushed.")
@click.argument("resource_name", metavar="RESOURCE", type=_RESOURCE_NAMES)
@click.argument("object_id", metavar="ID", type=click.UUID)
@fail_fast
def abandon(resource_name: str, object_id: uuid.UUID) -> None:
    from platform_svc.operations import abandon as abandoning
    settings, resource = Settings.from_env(), _BY_NAME[resource_name]
    client = settings.client(ClientPolicy(pool_size=1))  # one call: the copy, to check it is not the platform's
    try:
        done = abandoning.abandon(settings.database(), client, resource, object_id, by=f"{getpass.getuser()} (CLI)")
    except abandoning.NotAbandoned as exc:
        sys.exit(f"platform-svc abandon: not abandoned: {exc}")
    finally:
        client.close()
    click.echo(f"abandoned {resource.words} {object_id} ({done.rows} rows closed, its ID retired)")


@main.command(help="Rehearse an incident on a running pair (never one that serves users): id-conflict makes one.")
@click.argument("incident", type=click.Choice(["id-conflict"]))
@fail_fast
def drill(incident: str) -> None:
    from platform_svc.api import drill as drills
    settings = Settings.from_env()
    try:
        click.echo(drills.id_conflict(settings.database(), settings.client(ClientPolicy()), settings.horizon).told())
    except drills.NotRehearsed as exc:
        sys.exit(f"platform-svc drill: {exc}")


@main.command("sync-status", help="Count rows by sync state; list failed and stalled rows with their reasons.")
@click.option(
    "--retry-failed", is_flag=True,
    help="Re-check failed rows against cluster_svc and put back in line those that are still the platform's to"
    " push (committed first); the others stay failed, saying why.",
)
@click.option(
    "--resource", "resource_name", type=_RESOURCE_NAMES, help="With --retry-failed: only this resource's rows."
)
@click.option("--reason", help="With --retry-failed: only rows whose failure reason contains this text (any case).")
@click.option("--id", "object_id", type=click.UUID, help="With --retry-failed: only this object and its failed children.")
@click.option("--state", type=click.Choice([state.value for state in LISTED]),
              help="List the rows in this state instead of the failed and stalled ones.")
@click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(0), help="Rows listed per resource."
)
@fail_fast
@quiet_on_closed_pipe
def sync_status(
    retry_failed: bool, resource_name: str | None, reason: str | None, object_id: uuid.UUID | None,
    state: str | None, limit: int,
) -> None:
    from platform_svc.operations.status import read_status, report_lines
    from platform_svc.states import SyncState, stalled_after
    from shared.db import Database

    if not retry_failed and (resource_name or reason or object_id):
        raise click.UsageError("--resource, --reason and --id narrow --retry-failed; give it too.")
    database = Database(config.database_url("PLATFORM_DATABASE_URL"), pool_size=1)
    requeued = {}
    if retry_failed:
        # Committed before anything is printed: whoever reads the output (or
        # stops reading it) cannot undo it.
        requeued = _retry_failed(database, resource_name, reason, object_id)
    threshold = stalled_after()
    with database.engine.connect() as db_session:
        reports = [
            read_status(db_session=db_session, resource=resource, stalled_after=threshold, limit=limit,
                        state=SyncState(state) if state else None)
            for resource in RESOURCES
        ]
    for resource, report in zip(RESOURCES, reports):
        name = f"{resource.words}s"
        if resource in requeued:
            retried = requeued[resource]
            click.echo(f"{name}: {sum(r.requeued for r in retried)} failed rows put back in line")
            for left in (r for r in retried if not r.requeued):
                click.echo(f"  left failed {left.object_id}: {left.why}")
        for line in report_lines(name, report):
            click.echo(line)
