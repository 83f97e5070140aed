"""Hybrid retrieval over a user's memory: pure maths (tokenize, chunk, BM25, fusion) + adapters."""
