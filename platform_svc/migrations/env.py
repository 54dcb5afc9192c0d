"""Alembic environment for platform_svc (its own history, its own database)."""
from alembic import context
from sqlalchemy import create_engine

from platform_svc.models import Base

config = context.config


def run_migrations_online() -> None:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
