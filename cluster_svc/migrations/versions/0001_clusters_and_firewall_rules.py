"""clusters and firewall rules

Revision ID: 0001
Revises: 
Create Date: 2026-11-20 22:31:14.157756

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
    op.create_table('clusters',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('team_id', sa.Uuid(), nullable=True),
    sa.Column('name', sa.String(length=63), nullable=True),
    sa.Column('region', sa.String(length=32), nullable=True),
    sa.Column('postgres_version', sa.Integer(), nullable=True),
    sa.Column('plan', sa.String(length=32), nullable=True),
    sa.Column('storage_gb', sa.Integer(), nullable=True),
    sa.Column('generation', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint('deleted_at IS NOT NULL OR (team_id IS NOT NULL AND name IS NOT NULL AND region IS NOT NULL AND postgres_version IS NOT NULL AND plan IS NOT NULL AND storage_gb IS NOT NULL)', name=op.f('ck_clusters_live_rows_complete')),
    sa.CheckConstraint('generation >= 1', name=op.f('ck_clusters_generation_positive')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_clusters'))
    )
    op.create_index('ix_clusters_team_id_live', 'clusters', ['team_id', 'id'], unique=False, postgresql_where=sa.text('deleted_at IS NULL'))
    op.create_table('firewall_rules',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('cluster_id', sa.Uuid(), nullable=False),
    sa.Column('cidr', postgresql.CIDR(), nullable=True),
    sa.Column('description', sa.String(length=255), nullable=True),
    sa.Column('generation', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint('deleted_at IS NOT NULL OR cidr IS NOT NULL', name=op.f('ck_firewall_rules_live_rows_complete')),
    sa.CheckConstraint('generation >= 1', name=op.f('ck_firewall_rules_generation_positive')),
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f('fk_firewall_rules_cluster_id')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_firewall_rules'))
    )
    op.create_index('ix_firewall_rules_cluster_id', 'firewall_rules', ['cluster_id', 'id'], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index('ix_firewall_rules_cluster_id', table_name='firewall_rules')
    op.drop_table('firewall_rules')
    op.drop_index('ix_clusters_team_id_live', table_name='clusters', postgresql_where=sa.text('deleted_at IS NULL'))
    op.drop_table('clusters')
