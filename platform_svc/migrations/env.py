"""Alembic environment for platform_svc (its own history, its own database)."""
from platform_svc.models import Base
from shared.cli import run_migrations_online

run_migrations_online(Base.metadata)
