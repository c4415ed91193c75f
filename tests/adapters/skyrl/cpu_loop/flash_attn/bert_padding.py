"""Stub: the names model_wrapper.py:13 imports. They serve
``trainer.remove_microbatch_padding=true`` only (model_wrapper.py:351,447,530,574), which the CPU
loop turns off (its assertion, model_wrapper.py:154, wants flash-attention 2); calling one
raises."""

from typing import Any


def _stub(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(
        "flash_attn is a CPU test stub (set trainer.remove_microbatch_padding=false)"
    )


pad_input = unpad_input = _stub
