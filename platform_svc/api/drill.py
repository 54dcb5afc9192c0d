"""``platform-svc drill id-conflict``: a real ``id_conflict`` on a running pair, so an operator can
practise its runbook (docs/operations.md, "Rehearsing an id_conflict") before meeting one.

What happens is what happens in the incident itself, in the order that makes it certain: the
platform commits a new object of its first root resource (of the account ``drill``, made on first
use) under its inline push's lease, so no reconciler pushes it meanwhile; another team's object is
created in cluster_svc under the same ID, as a caller of the internal API with its own IDs could;
then the platform pushes its row, meets 409 ``id_conflict``, and the row is failed with that
reason. The console then shows it as the incident shows it; Abandon closes it. Nothing is faked:
only the order of two writes is chosen.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.engine import RowMapping

from platform_svc.api import services
from platform_svc.models import RESOURCES, Account
from platform_svc.push.inline import InlinePusher
from platform_svc.push.pusher import PushPath
from platform_svc.states import SyncState
from shared.client import InternalClient
from shared.contract import EXAMPLES
from shared.db import Database
from shared.horizon import Horizon

ACCOUNT = "drill"
LEASE = timedelta(seconds=60)  # long enough for the other team's create to land first


class NotRehearsed(Exception):
    """Why the incident could not be made (nothing is left half-done: the row is an ordinary one)."""


@dataclass(frozen=True)
class Rehearsal:
    """The incident made: the platform's row, failed by its push."""

    object_id: uuid.UUID
    account_id: uuid.UUID
    row: RowMapping

    def told(self) -> str:
        """What ``platform-svc drill id-conflict`` prints: what it made, and where the runbook starts."""
        root = RESOURCES.roots[0]
        return (f"{self.object_id} (account {ACCOUNT!r}, {self.account_id}) is failed: {self.row['sync_error']}\n"
                f"open /console/objects/{root.segment}/{self.object_id} and follow docs/operations.md,"
                f" \"Rehearsing an id_conflict\"")


def id_conflict(database: Database, client: InternalClient, horizon: Horizon) -> Rehearsal:
    """Make an object the platform cannot push, because cluster_svc holds another team's under its ID.

    :raise NotRehearsed: cluster_svc refused the other team's create, or the push did not fail
        with ``id_conflict``.
    """
    root = RESOURCES.roots[0]
    values = EXAMPLES[root.key]
    with database.begin() as db_session:
        account_id = db_session.execute(select(Account.id).where(Account.name == ACCOUNT)).scalar() or \
            services.create_account(db_session=db_session, name=ACCOUNT)[0]
        [created] = services.create_objects(db_session=db_session, resource=root,
                                            items=[{**values, "account_id": account_id}], lease=LEASE, horizon=horizon)
        row, _ = created.unwrap()
    theirs = client.create(f"/v1{root.collection_path()}",
                           {**values, "id": str(row["id"]), root.declaration.owner: str(uuid.uuid4())})
    if theirs.status != 201:
        raise NotRehearsed(f"cluster_svc did not take the other team's object: {theirs.reason}")
    pushed = InlinePusher(PushPath(database, client, horizon=horizon)).push_now(root, row)
    if pushed["sync_state"] != SyncState.FAILED or "id_conflict" not in (pushed["sync_error"] or ""):
        raise NotRehearsed(f"the push did not meet an id_conflict: {pushed['sync_state']}, {pushed['sync_error']}")
    return Rehearsal(row["id"], account_id, pushed)
