"""asked-for repair runs (repair_runs.holder may be empty), and cluster_svc_sightings

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 23:00:00

A real repair run started on the console is recorded *asked for*, with no
holder, and claimed by whichever process holds the lease on the periodic passes
(the leading reconciler, within a second); ``holder`` is set when it is claimed.

``cluster_svc_sightings``: whether cluster_svc served each process's last call,
one row per process, for the console's overview (platform_svc.operations.sightings).
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: Union[str, Sequence[str], None] = '0010'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.alter_column('repair_runs', 'holder', nullable=True)
    op.create_table(
        'cluster_svc_sightings',
        sa.Column('observer', sa.Text(), primary_key=True),
        sa.Column('role', sa.Text(), nullable=False),
        sa.Column('served', sa.Boolean(), nullable=False),
        sa.Column('what', sa.Text(), nullable=False),
        sa.Column('seen_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('since', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('cluster_svc_sightings')
    op.execute("UPDATE repair_runs SET holder = 'never claimed' WHERE holder IS NULL")
    op.alter_column('repair_runs', 'holder', nullable=False)
