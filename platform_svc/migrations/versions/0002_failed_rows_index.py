"""a partial index on failed rows, so counting rows by state scans no table but for its total

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 12:10:00

Built CONCURRENTLY: on a platform with millions of rows, a plain CREATE INDEX
would hold writes to the table for as long as it reads it.
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
                f'ix_{table}_failed', table, ['sync_failed_at'], unique=False,
                postgresql_where=sa.text("sync_state = 'failed'"), postgresql_concurrently=True, if_not_exists=True,
            )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.drop_index(f'ix_{table}_failed', table_name=table, postgresql_concurrently=True, if_exists=True)
