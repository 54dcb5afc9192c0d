"""an index on deleted rows, (deleted_at, id) where deleted_at is set: purge walks it, never the table

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 10:05:00

Built CONCURRENTLY, as 0002: a plain CREATE INDEX would hold writes to a
big table for as long as it reads it.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: Union[str, Sequence[str], None] = '0002'
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
