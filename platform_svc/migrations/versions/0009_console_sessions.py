"""console sessions kept server-side, and refused logins counted per name and per source

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 20:40:00

A console cookie now names a row of ``console_sessions`` (by its token's SHA-256):
logout deletes it, and its lifetime is counted from the login, not from the
last page. ``console_login_failures`` throttles guessing across every worker
and replica. Sessions opened before this migration end with it (their
cookies name no row).
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: Union[str, Sequence[str], None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'console_sessions',
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('operator_id', sa.Uuid(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('seen_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.ForeignKeyConstraint(['operator_id'], ['operators.id'], name=op.f('fk_console_sessions_operator_id'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('token_hash', name=op.f('pk_console_sessions')),
    )
    op.create_index(op.f('ix_console_sessions_operator_id'), 'console_sessions', ['operator_id'], unique=False)
    op.create_table(
        'console_login_failures',
        sa.Column('key', sa.Text(), nullable=False),
        sa.Column('failures', sa.Integer(), nullable=False),
        sa.Column('first_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('key', name=op.f('pk_console_login_failures')),
    )


def downgrade() -> None:
    op.drop_table('console_login_failures')
    op.drop_index(op.f('ix_console_sessions_operator_id'), table_name='console_sessions')
    op.drop_table('console_sessions')
