"""leases: a row per lease (repair: which reconciler runs the periodic passes), instead of an advisory lock

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 09:00:00

A session advisory lock does not work through a pooler in transaction mode
(PgBouncer) nor on engines without them (CockroachDB, YugabyteDB); a row
taken and renewed with one statement does (docs/decisions/0011).
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: Union[str, Sequence[str], None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'leases',
        sa.Column('name', sa.Text(), nullable=False),
        sa.Column('holder', sa.Text(), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_leases')),
    )


def downgrade() -> None:
    op.drop_table('leases')
