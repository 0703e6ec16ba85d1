"""Serving: the health gate that says when a vLLM endpoint is loading, ready or failed, and the real
vLLM CPU engine used to test it (see docs/serving.md)."""
