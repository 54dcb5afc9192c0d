"""key changes: one counter every change to who may call raises, read by each web worker

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 20:10:00

Web workers admit public requests from their own copy of the keys they have
seen (platform_svc.api.admission). ``key_changes.generation`` is raised, by
statement-level triggers in the same transaction, whenever a key is added,
revoked, changed or removed, or an account's limit changes or the account is
removed; a worker reads it every 0.25 s (a poll: PgBouncer in transaction mode
passes no LISTEN) and re-reads its keys when it moved. Writing ``last_used_at``
raises nothing: it changes no one's right to call.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: Union[str, Sequence[str], None] = '0007'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'key_changes',
        sa.Column('id', sa.SmallInteger(), nullable=False),
        sa.Column('generation', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_key_changes')),
    )
    op.execute("INSERT INTO key_changes (id, generation) VALUES (1, 1)")
    op.execute("""
        CREATE FUNCTION key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE key_changes SET generation = generation + 1 WHERE id = 1;
            RETURN NULL;
        END $$
    """)
    op.execute("""
        CREATE TRIGGER api_keys_changed
        AFTER INSERT OR DELETE OR UPDATE OF key_id, key_hash, account_id, revoked_at ON api_keys
        FOR EACH STATEMENT EXECUTE FUNCTION key_changed()
    """)
    op.execute("CREATE TRIGGER api_keys_truncated AFTER TRUNCATE ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION key_changed()")
    op.execute("""
        CREATE TRIGGER accounts_changed
        AFTER DELETE OR UPDATE OF id, rate_limit ON accounts
        FOR EACH STATEMENT EXECUTE FUNCTION key_changed()
    """)
    op.execute("CREATE TRIGGER accounts_truncated AFTER TRUNCATE ON accounts FOR EACH STATEMENT EXECUTE FUNCTION key_changed()")


def downgrade() -> None:
    for trigger, table in (("accounts_truncated", "accounts"), ("accounts_changed", "accounts"),
                           ("api_keys_truncated", "api_keys"), ("api_keys_changed", "api_keys")):
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
    op.execute("DROP FUNCTION key_changed()")
    op.drop_table('key_changes')
