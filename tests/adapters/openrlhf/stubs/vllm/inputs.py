"""Stub: TokensPrompt for OpenRLHF's vllm_engine (a TypedDict in vllm: a dict here)."""

TokensPrompt = dict
