"""keyword_impact() in integer arithmetic: the same smallint for every input, without numeric.

The pruned keyword leg computes the impact of every block posting it reads (to merge a lexeme's
blocks with its delta, best first), and in numeric that was a tenth of the statement's CPU at
50,000 memories (docs/benchmarks.md). The impact 0006 defines is
round(32767·tf / (tf + 1.2·(0.25 + 0.75·dl / 16))); multiplied out by 160 it is the fraction
5242720·tf / (160·tf + 48 + 9·dl) = N / D of integers, and rounding half away from zero of a
positive N / D is floor((2N + D) / 2D), which bigint division computes exactly. numeric got the
same value: its quotient is exact to 11 decimals or more here, and an N / D that is not a half lies at
least 1 / 2D from one, with D < 10^8 for any tsvector (tf <= 256 positions, dl < 2^20 lexemes).
tests/test_keyword_blocks.py compares both on a grid. Stored impacts stay valid; nothing is
rewritten.

Revision ID: 0016_keyword_impact_integer
Revises: 0015_tenant_vector_indexes
"""

from alembic import op

revision = "0016_keyword_impact_integer"
down_revision = "0015_tenant_vector_indexes"
branch_labels = None
depends_on = None

# 2N and D of the docstring, with tf and dl as bigint so no product overflows.
_DENOMINATOR = "(160 * term_frequency::bigint + 48 + 9 * document_length::bigint)"


def upgrade() -> None:
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION keyword_impact(term_frequency integer, document_length integer) RETURNS smallint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
            SELECT ((10485440 * term_frequency::bigint + {_DENOMINATOR}) / (2 * {_DENOMINATOR}))::smallint
        $$
        """
    )


def downgrade() -> None:
    op.execute(
        """
        CREATE OR REPLACE FUNCTION keyword_impact(term_frequency integer, document_length integer) RETURNS smallint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
            SELECT round(32767.0 * term_frequency
                         / (term_frequency + 1.2 * (0.25 + 0.75 * document_length / 16.0)))::smallint
        $$
        """
    )
