"""operators looked up by their secret's hash: a unique constraint on operators.secret_hash

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 23:30:00

A console login looks its operator up by the hash of the secret it was sent
(and the name with it), so a wrong secret finds no index entry whether the name
exists or not: a refused login takes the same time for a known and an unknown
name (platform_svc.console.auth.check_secret).
"""
from typing import Sequence, Union

from alembic import op

revision: str = '0012'
down_revision: Union[str, Sequence[str], None] = '0011'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_unique_constraint(op.f('uq_operators_secret_hash'), 'operators', ['secret_hash'])


def downgrade() -> None:
    op.drop_constraint(op.f('uq_operators_secret_hash'), 'operators', type_='unique')
