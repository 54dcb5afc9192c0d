"""Alembic environment for cluster_svc (its own history, its own database)."""
from cluster_svc.models import Base
from shared.cli import run_migrations_online

run_migrations_online(Base.metadata)
