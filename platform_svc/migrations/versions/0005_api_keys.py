"""api_keys: an account may hold several API keys, each listed and revoked on its own

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27 09:00:00

The key each account had (accounts.key_id, key_hash) moves to api_keys, so
every key issued so far keeps working. A revoked key keeps its row
(revoked_at), for list-keys to show.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: Union[str, Sequence[str], None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'api_keys',
        sa.Column('key_id', sa.String(length=32), nullable=False),
        sa.Column('account_id', sa.Uuid(), nullable=False),
        sa.Column('key_hash', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['account_id'], ['accounts.id'], name=op.f('fk_api_keys_account_id'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('key_id', name=op.f('pk_api_keys')),
    )
    op.create_index(op.f('ix_api_keys_account_id'), 'api_keys', ['account_id'], unique=False)
    op.execute(
        "INSERT INTO api_keys (key_id, account_id, key_hash, created_at)"
        " SELECT key_id, id, key_hash, created_at FROM accounts"
    )
    op.drop_constraint(op.f('uq_accounts_key_id'), 'accounts', type_='unique')
    op.drop_column('accounts', 'key_hash')
    op.drop_column('accounts', 'key_id')


def downgrade() -> None:
    # Each account keeps its oldest key still valid (one key per account before this revision);
    # an account with none left gets a key nobody holds.
    op.add_column('accounts', sa.Column('key_id', sa.String(length=32), nullable=True))
    op.add_column('accounts', sa.Column('key_hash', sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE accounts SET key_id = k.key_id, key_hash = k.key_hash FROM ("
        " SELECT DISTINCT ON (account_id) account_id, key_id, key_hash FROM api_keys"
        " WHERE revoked_at IS NULL ORDER BY account_id, created_at) k WHERE k.account_id = accounts.id"
    )
    op.execute(
        "UPDATE accounts SET key_id = substr(md5(random()::text), 1, 16), key_hash = md5(random()::text)"
        " WHERE key_id IS NULL"
    )
    op.alter_column('accounts', 'key_id', nullable=False)
    op.alter_column('accounts', 'key_hash', nullable=False)
    op.create_unique_constraint(op.f('uq_accounts_key_id'), 'accounts', ['key_id'])
    op.drop_index(op.f('ix_api_keys_account_id'), table_name='api_keys')
    op.drop_table('api_keys')
