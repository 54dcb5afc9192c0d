"""abandoned rows: abandoned_at on every pushed table

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 21:00:00

A failed row whose ID is held in cluster_svc by an object that is not the
platform's (an ``id_conflict``) can be closed by a person without cooperation
from that object's owner: deleted on the platform, never pushed, its ID
retired (``platform-svc abandon``). ``abandoned_at`` says so; repair leaves
such a row alone, so it never fails again.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: Union[str, Sequence[str], None] = '0009'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TABLES = ('clusters', 'firewall_rules')


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column('abandoned_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, 'abandoned_at')
