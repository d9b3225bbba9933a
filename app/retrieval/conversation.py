"""How an episode of a conversation is indexed for the keyword leg: its previous turn, then itself."""

from __future__ import annotations

from collections.abc import Sequence

# Measured on locomo-dev (docs/benchmarks.md): with the previous turn in its keyword text, an
# answer such as "Yes, twice!" is found by the words of the question it answers; evidence recall@10
# of hybrid search rose from 0.647 to 0.706. Two previous turns measured 0.715, the next turn did
# not help. The embedding is of the turn alone: a mean-pooled sentence embedding of two turns
# blurs both (semantic recall@10 0.579 alone against 0.428 with the turn before, transcript style),
# and hybrid search was better on both import styles with the turn alone embedded.
PREVIOUS_TURNS = 1


def episode_representation(previous: Sequence[str], content: str) -> str:
    """The keyword text of an episode: up to PREVIOUS_TURNS earlier turns (oldest first), then its own."""
    return "\n".join([*previous[-PREVIOUS_TURNS:], content]) if PREVIOUS_TURNS else content
