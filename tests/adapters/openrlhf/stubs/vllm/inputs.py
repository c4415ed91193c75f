"""Stand-in: TokensPrompt (a TypedDict in vllm: a dict here)."""

TokensPrompt = dict
