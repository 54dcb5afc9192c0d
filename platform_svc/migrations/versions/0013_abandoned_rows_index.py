"""an index on abandoned rows, where abandoned_at is set: every surface counts them apart from synced

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 03:00:00

``abandoned`` is a shown state (platform_svc.states): a row closed by a person, never pushed. Its
``sync_state`` column says synced (its delete is settled); sync-status, the console and the
``sync_rows`` gauge count it apart through this index, never by reading the table. Built
CONCURRENTLY, as 0002 and 0003.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0013'
down_revision: Union[str, Sequence[str], None] = '0012'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TABLES = ('clusters', 'firewall_rules')


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.create_index(
                f'ix_{table}_abandoned', table, ['abandoned_at'], unique=False,
                postgresql_where=sa.text('abandoned_at IS NOT NULL'), postgresql_concurrently=True, if_not_exists=True,
            )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.drop_index(f'ix_{table}_abandoned', table_name=table, postgresql_concurrently=True, if_exists=True)
