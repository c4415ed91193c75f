"""Import stub of flash_attn for SkyRL on CPU (tests only): nothing here runs.

``skyrl/backends/skyrl_train/workers/model_wrapper.py:13`` imports
``flash_attn.bert_padding`` at module level; flash-attn builds only against CUDA.
"""
