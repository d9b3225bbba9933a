"""The serving role sees tenant data only through RLS, and keys only through one function.

Until now the service logged in as the owner and switched to recalld_app per transaction, so
anything outside that wrapper ran unbounded, and recalld_app could read every tenant's key
hashes. The service now logs in as recalld_app itself; it loses SELECT on tenant and api_key and
authenticates through recalld_authenticate(), a SECURITY DEFINER function that answers for one
key hash only. api_key gets RLS like every table with a tenant_id (the owner keeps full access
through its own policy, for the admin commands and the functions below).

Revision ID: 0011_serving_role
Revises: 0010_memory_script
"""

from alembic import op

revision = "0011_serving_role"
down_revision = "0010_memory_script"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("REVOKE ALL ON tenant, api_key FROM recalld_app")
    # Triggers running as the serving role look up the row's tenant (0008): it sees its own
    # tenant inside a tenant transaction, and no tenant at all outside one.
    op.execute("ALTER TABLE tenant ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE tenant FORCE ROW LEVEL SECURITY")
    op.execute("CREATE POLICY tenant_isolation ON tenant FOR SELECT USING (id = ANY (recalld_tenant_ids()))")
    op.execute("CREATE POLICY tenant_owner ON tenant TO CURRENT_USER USING (true) WITH CHECK (true)")
    op.execute("GRANT SELECT ON tenant TO recalld_app")
    op.execute("GRANT SELECT, INSERT ON system_config TO recalld_app")
    op.execute("GRANT SELECT ON alembic_version TO recalld_app")
    op.execute("ALTER TABLE api_key ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE api_key FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY api_key_tenant_isolation ON api_key "
        "USING (tenant_id = ANY (recalld_tenant_ids())) "
        "WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
    )
    # The owner runs `recalld keys ...` and owns the functions below; FORCE would bind it too.
    op.execute("CREATE POLICY api_key_owner ON api_key TO CURRENT_USER USING (true) WITH CHECK (true)")
    # search_path pinned and every name qualified: a SECURITY DEFINER function must not resolve
    # names through a schema its caller controls.
    op.execute(
        """
        CREATE FUNCTION recalld_authenticate(p_key_hash bytea)
        RETURNS TABLE (tenant_id uuid, tenant_name text, key_id uuid, role text, operator boolean)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            SELECT k.tenant_id, t.name, k.id, k.role, k.operator
            FROM public.api_key k JOIN public.tenant t ON t.id = k.tenant_id
            WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
        $$
        """
    )
    # Cross-tenant retrieval resolves tenant names; only a live operator key may list them.
    op.execute(
        """
        CREATE FUNCTION recalld_operator_tenants(p_tenant_id uuid, p_key_id uuid, p_names text[])
        RETURNS TABLE (id uuid, name text)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            SELECT t.id, t.name FROM public.tenant t
            WHERE EXISTS (
                    SELECT 1 FROM public.api_key k
                    WHERE k.tenant_id = p_tenant_id AND k.id = p_key_id
                      AND k.operator AND k.revoked_at IS NULL)
              AND (p_names IS NULL OR t.name = ANY (p_names))
            ORDER BY t.name
        $$
        """
    )
    for signature in ("recalld_authenticate(bytea)", "recalld_operator_tenants(uuid, uuid, text[])"):
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO recalld_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION recalld_operator_tenants(uuid, uuid, text[])")
    op.execute("DROP FUNCTION recalld_authenticate(bytea)")
    op.execute("DROP POLICY api_key_owner ON api_key")
    op.execute("DROP POLICY api_key_tenant_isolation ON api_key")
    op.execute("ALTER TABLE api_key NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE api_key DISABLE ROW LEVEL SECURITY")
    op.execute("REVOKE SELECT ON alembic_version FROM recalld_app")
    op.execute("REVOKE SELECT, INSERT ON system_config FROM recalld_app")
    op.execute("DROP POLICY tenant_owner ON tenant")
    op.execute("DROP POLICY tenant_isolation ON tenant")
    op.execute("ALTER TABLE tenant NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE tenant DISABLE ROW LEVEL SECURITY")
    op.execute("GRANT SELECT ON tenant, api_key TO recalld_app")
