"""an index on tombstones, (deleted_at, id) where deleted_at is set: the tombstone gauges and purge read it, never the table

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 10:00:00

Built CONCURRENTLY: on a table with millions of rows, a plain CREATE INDEX
would hold writes to it for as long as it reads it.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: Union[str, Sequence[str], None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TABLES = ('clusters', 'firewall_rules')


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.create_index(
                f'ix_{table}_deleted', table, ['deleted_at', 'id'], unique=False,
                postgresql_where=sa.text('deleted_at IS NOT NULL'), postgresql_concurrently=True, if_not_exists=True,
            )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.drop_index(f'ix_{table}_deleted', table_name=table, postgresql_concurrently=True, if_exists=True)
