"""Foundation: tenants, API keys, the application role and the row-level-security helper.

Revision ID: 0001_foundation
Revises:
"""

from alembic import op

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    # The service switches to this role in every transaction, so row-level security applies even
    # when the login user owns the tables or is a superuser. NOBYPASSRLS is the default; say it.
    op.execute(
        """
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'recalld_app') THEN
                CREATE ROLE recalld_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
            END IF;
        END
        $$
        """
    )
    op.execute("GRANT recalld_app TO CURRENT_USER")
    op.execute("GRANT USAGE ON SCHEMA public TO recalld_app")
    # The tenants a transaction may see, from the transaction-local setting recalld.tenant_ids.
    # Unset or empty means none: a forgotten set_config fails closed.
    op.execute(
        """
        CREATE FUNCTION recalld_tenant_ids() RETURNS uuid[]
        LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT coalesce(
                string_to_array(nullif(current_setting('recalld.tenant_ids', true), ''), ',')::uuid[],
                '{}'::uuid[])
        $$
        """
    )
    op.execute("GRANT EXECUTE ON FUNCTION recalld_tenant_ids() TO recalld_app")
    op.execute(
        """
        CREATE TABLE tenant (
            id uuid NOT NULL,
            name text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT tenant_pkey PRIMARY KEY (id),
            CONSTRAINT tenant_name_key UNIQUE (name),
            CONSTRAINT tenant_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$')
        )
        """
    )
    # api_key is the registry that authentication reads before any tenant is known, so it is not
    # under RLS (on Citus it becomes a reference table). Only hashes are stored.
    op.execute(
        """
        CREATE TABLE api_key (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL,
            prefix text NOT NULL,
            key_hash bytea NOT NULL,
            role text NOT NULL,
            operator boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL DEFAULT now(),
            revoked_at timestamptz,
            CONSTRAINT api_key_pkey PRIMARY KEY (tenant_id, id),
            CONSTRAINT api_key_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE,
            CONSTRAINT api_key_role_check CHECK (role IN ('reader', 'writer', 'admin'))
        )
        """
    )
    op.execute("CREATE UNIQUE INDEX api_key_key_hash_key ON api_key (key_hash)")
    op.execute("CREATE INDEX api_key_prefix_idx ON api_key (prefix)")
    op.execute(
        """
        CREATE TABLE system_config (
            key text NOT NULL,
            value jsonb NOT NULL,
            CONSTRAINT system_config_pkey PRIMARY KEY (key)
        )
        """
    )
    op.execute("GRANT SELECT ON tenant, api_key, system_config TO recalld_app")


def downgrade() -> None:
    op.execute("DROP TABLE system_config")
    op.execute("DROP TABLE api_key")
    op.execute("DROP TABLE tenant")
    op.execute("DROP FUNCTION recalld_tenant_ids()")
