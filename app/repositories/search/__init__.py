"""SQL of the retrieval legs, one module per leg; rank in SQL, fuse in Python (retrieval.fusion)."""

from app.repositories.search.filters import CandidateFilter
from app.repositories.search.keyword import KeywordRows, search_by_bm25
from app.repositories.search.substring import search_by_substring
from app.repositories.search.vector import (
    ExactVectorRows,
    index_walks,
    search_by_exact_vector,
    search_by_vector,
)

__all__ = [
    "CandidateFilter",
    "ExactVectorRows",
    "KeywordRows",
    "index_walks",
    "search_by_bm25",
    "search_by_exact_vector",
    "search_by_substring",
    "search_by_vector",
]
