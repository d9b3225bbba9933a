"""memory_vector_update survives pg_dump and pg_restore.

Its WHEN clause compared the embeddings with IS DISTINCT FROM, which PostgreSQL prints back
without naming the operator's schema. pg_restore runs with an empty search_path, so it could not
find pgvector's = for that clause, failed to create the trigger ("operator does not exist:
public.vector = public.vector") and went on: the restored database silently stopped copying
updated embeddings into memory_vector. The same condition written with <> is printed back with its
schema (OPERATOR(public.<>)), so it restores wherever pgvector lives; tests/test_dump_restore.py
restores a dump and compares the catalogue.

Revision ID: 0019_restorable_vector_trigger
Revises: 0018_memory_number_bounds
"""

from alembic import op

revision = "0019_restorable_vector_trigger"
down_revision = "0018_memory_number_bounds"
branch_labels = None
depends_on = None

_CREATE = (
    "CREATE TRIGGER memory_vector_update AFTER UPDATE OF embedding ON memory FOR EACH ROW WHEN ({}) "
    "EXECUTE FUNCTION memory_vector_of_updated_row()"
)


def upgrade() -> None:
    op.execute("DROP TRIGGER memory_vector_update ON memory")
    # IS DISTINCT FROM, spelled out: one side null and not the other, or both set and unequal.
    op.execute(
        _CREATE.format("(OLD.embedding IS NULL) <> (NEW.embedding IS NULL) OR OLD.embedding <> NEW.embedding")
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_vector_update ON memory")
    op.execute(_CREATE.format("OLD.embedding IS DISTINCT FROM NEW.embedding"))
