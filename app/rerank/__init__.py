"""Rerankers of the fused top-N: a local cross-encoder or an HTTP /rerank endpoint."""
