"""accounts, clusters and firewall rules with sync state

Revision ID: 0001
Revises: 
Create Date: 2026-11-20 22:35:42.629091

"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = '0001'
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table('accounts',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('key_id', sa.String(length=32), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_accounts')),
    sa.UniqueConstraint('key_id', name=op.f('uq_accounts_key_id'))
    )
    op.create_table('clusters',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('postgres_version', sa.Integer(), nullable=False),
    sa.Column('plan', sa.String(length=32), nullable=False),
    sa.Column('storage_gb', sa.Integer(), nullable=False),
    sa.Column('account_id', sa.Uuid(), nullable=False),
    sa.Column('generation', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('synced_generation', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delete_synced_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sync_state', sa.String(length=7), sa.Computed("CASE\n    WHEN sync_failed_at IS NOT NULL THEN 'failed'\n    WHEN deleted_at IS NULL AND synced_generation >= generation THEN 'synced'\n    WHEN deleted_at IS NOT NULL AND delete_synced_at IS NOT NULL THEN 'synced'\n    ELSE 'pending'\nEND", persisted=True), nullable=False),
    sa.Column('synced_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sync_error', sa.Text(), nullable=True),
    sa.Column('sync_failed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('request_fingerprint', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_clusters_account_id')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_clusters')),
    sa.UniqueConstraint('account_id', 'idempotency_key', name=op.f('uq_clusters_account_id_idempotency_key'))
    )
    op.create_index('ix_clusters_due', 'clusters', ['next_attempt_at'], unique=False, postgresql_where=sa.text("sync_state = 'pending'"))
    op.create_table('firewall_rules',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('cluster_id', sa.Uuid(), nullable=False),
    sa.Column('cidr', postgresql.CIDR(), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('account_id', sa.Uuid(), nullable=False),
    sa.Column('generation', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('synced_generation', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delete_synced_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sync_state', sa.String(length=7), sa.Computed("CASE\n    WHEN sync_failed_at IS NOT NULL THEN 'failed'\n    WHEN deleted_at IS NULL AND synced_generation >= generation THEN 'synced'\n    WHEN deleted_at IS NOT NULL AND delete_synced_at IS NOT NULL THEN 'synced'\n    ELSE 'pending'\nEND", persisted=True), nullable=False),
    sa.Column('synced_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sync_error', sa.Text(), nullable=True),
    sa.Column('sync_failed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('request_fingerprint', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_firewall_rules_account_id')),
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f('fk_firewall_rules_cluster_id')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_firewall_rules')),
    sa.UniqueConstraint('account_id', 'idempotency_key', name=op.f('uq_firewall_rules_account_id_idempotency_key'))
    )
    op.create_index(op.f('ix_firewall_rules_cluster_id'), 'firewall_rules', ['cluster_id'], unique=False)
    op.create_index('ix_firewall_rules_due', 'firewall_rules', ['next_attempt_at'], unique=False, postgresql_where=sa.text("sync_state = 'pending'"))


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index('ix_firewall_rules_due', table_name='firewall_rules', postgresql_where=sa.text("sync_state = 'pending'"))
    op.drop_index(op.f('ix_firewall_rules_cluster_id'), table_name='firewall_rules')
    op.drop_table('firewall_rules')
    op.drop_index('ix_clusters_due', table_name='clusters', postgresql_where=sa.text("sync_state = 'pending'"))
    op.drop_table('clusters')
    op.drop_table('accounts')
