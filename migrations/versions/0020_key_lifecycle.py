"""API keys expire, are rotated with a grace period, and remember when they were last used.

expires_at: a key stops authenticating at that moment (rotation sets it on the old key to the end
of the grace period). last_used_at: written by recalld_authenticate itself, at most once a minute
per key, so `recalld keys list` can show stale keys without a write on every request. The
function becomes VOLATILE for that write; it still answers for one key hash only.

Revision ID: 0020_key_lifecycle
Revises: 0019_restorable_vector_trigger
"""

from alembic import op

revision = "0020_key_lifecycle"
down_revision = "0019_restorable_vector_trigger"
branch_labels = None
depends_on = None

_SIGNATURE = "RETURNS TABLE (tenant_id uuid, tenant_name text, key_id uuid, role text, operator boolean)"
_LIVE = "k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())"


def _operator_tenants(live: str) -> str:
    return f"""
        CREATE OR REPLACE FUNCTION recalld_operator_tenants(p_tenant_id uuid, p_key_id uuid, p_names text[])
        RETURNS TABLE (id uuid, name text)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            SELECT t.id, t.name FROM public.tenant t
            WHERE EXISTS (
                    SELECT 1 FROM public.api_key k
                    WHERE k.tenant_id = p_tenant_id AND k.id = p_key_id AND k.operator AND {live})
              AND (p_names IS NULL OR t.name = ANY (p_names))
            ORDER BY t.name
        $$
    """


def upgrade() -> None:
    op.execute("ALTER TABLE api_key ADD COLUMN expires_at timestamptz, ADD COLUMN last_used_at timestamptz")
    # The UPDATE is skipped while the recorded use is under a minute old: a busy key costs one row
    # write a minute, not one per request. Concurrent requests at the minute's turn serialise on
    # the row lock, and the second finds the fresh value (READ COMMITTED re-check) and writes nothing.
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION recalld_authenticate(p_key_hash bytea)
        {_SIGNATURE}
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            WITH live AS (
                SELECT k.tenant_id, t.name, k.id, k.role, k.operator, k.last_used_at
                FROM public.api_key k JOIN public.tenant t ON t.id = k.tenant_id
                WHERE k.key_hash = p_key_hash AND {_LIVE}
            ), touched AS (
                UPDATE public.api_key k SET last_used_at = now()
                FROM live
                WHERE k.tenant_id = live.tenant_id AND k.id = live.id
                  AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
            )
            SELECT tenant_id, name, id, role, operator FROM live
        $$
        """
    )
    op.execute(_operator_tenants(_LIVE))


def downgrade() -> None:
    op.execute(_operator_tenants("k.revoked_at IS NULL"))
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION recalld_authenticate(p_key_hash bytea)
        {_SIGNATURE}
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            SELECT k.tenant_id, t.name, k.id, k.role, k.operator
            FROM public.api_key k JOIN public.tenant t ON t.id = k.tenant_id
            WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
        $$
        """
    )
    op.execute("ALTER TABLE api_key DROP COLUMN last_used_at, DROP COLUMN expires_at")
