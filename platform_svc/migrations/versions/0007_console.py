"""console: operators, the console's signing key, the last pass of each kind, repair runs started from the console

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 09:00:00

What the operator's console (platform_svc.console) keeps: its own credential
(``operators``), the key its session cookies are signed with (``console_keys``,
shared by every worker and replica), what the overview shows of the periodic
work (``passes``) and the progress of repair runs started from a page
(``repair_runs``). It reads nothing of another migration's tables but 0004's.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0007'
down_revision: Union[str, Sequence[str], None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'operators',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('secret_hash', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_operators')),
        sa.UniqueConstraint('name', name=op.f('uq_operators_name')),
    )
    op.create_table(
        'console_keys',
        sa.Column('name', sa.Text(), nullable=False),
        sa.Column('secret', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_console_keys')),
    )
    op.create_table(
        'passes',
        sa.Column('name', sa.Text(), nullable=False),
        sa.Column('holder', sa.Text(), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('summary', sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_passes')),
    )
    op.create_table(
        'repair_runs',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('dry_run', sa.Boolean(), nullable=False),
        sa.Column('operator', sa.Text(), nullable=False),
        sa.Column('holder', sa.Text(), nullable=False),
        sa.Column('total', sa.Integer(), nullable=False),
        sa.Column('compared', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('findings', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"),
                  nullable=False),
        sa.Column('summary', sa.Text(), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('started_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_repair_runs')),
    )


def downgrade() -> None:
    op.drop_table('repair_runs')
    op.drop_table('passes')
    op.drop_table('console_keys')
    op.drop_table('operators')
