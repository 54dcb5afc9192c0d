"""The last pass of each kind, for the console's overview: one row per kind in ``passes``.

The reconciler's push bursts, the leader's repair and purge passes, ``platform-svc
repair`` and ``purge`` run by hand, and repair runs started from the console (dry runs
too: their summary says so) each overwrite their kind's row as they end: one small
autocommit UPSERT per pass, not a history (the logs keep that). A failure to
record is one warning line: it never stops the work it describes.
"""
from __future__ import annotations

import logging
import os
import socket

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError

from platform_svc.models import Pass
from shared.db import Database
from shared.errors import describe_database_error

log = logging.getLogger(__name__)

KINDS = ("reconcile", "repair", "purge")


def this_process() -> str:
    """Who ran a pass, as the console shows it: ``host:pid`` (asked each time: gunicorn forks)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def record_pass(database: Database, name: str, holder: str, summary: str) -> None:
    """Overwrite ``name``'s row with this pass, ended now (the database's clock)."""
    table = Pass.__table__
    values = {"holder": holder, "summary": summary[:2000], "finished_at": func.now()}
    try:
        with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as db_session:
            upsert = insert(table).values(name=name, **values)
            db_session.execute(upsert.on_conflict_do_update(index_elements=[table.c.name], set_=values))
    except DBAPIError as exc:
        log.warning("the %s pass could not be recorded for the console (%s)", name, describe_database_error(exc))
