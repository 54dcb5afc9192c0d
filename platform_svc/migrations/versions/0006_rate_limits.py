"""rate limits: accounts.rate_limit (NULL: the default) and rate_windows, an UNLOGGED counter per account

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 09:10:00

rate_windows is UNLOGGED: counting a request writes no WAL and waits for no
flush; a crash or failover empties it, which only restarts the windows.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: Union[str, Sequence[str], None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('accounts', sa.Column('rate_limit', sa.Integer(), nullable=True))
    op.create_table(
        'rate_windows',
        sa.Column('account_id', sa.Uuid(), nullable=False),
        sa.Column('window_start', sa.DateTime(timezone=True), nullable=False),
        sa.Column('used', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('account_id', name=op.f('pk_rate_windows')),
        prefixes=['UNLOGGED'],
    )


def downgrade() -> None:
    op.drop_table('rate_windows')
    op.drop_column('accounts', 'rate_limit')
