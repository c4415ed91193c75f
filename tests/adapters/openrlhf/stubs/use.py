"""Put the import stubs on ``sys.path`` (and on PYTHONPATH, for subprocesses and Ray
workers) when OpenRLHF is installed without ``flash_attn`` or ``vllm``; see README.md.
Loaded by path from ``conftest.py`` and from the shared suite's driver, ``contract.py``."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path

STUBS = Path(__file__).parent


def use_import_stubs() -> None:
    if importlib.util.find_spec("openrlhf") is None or str(STUBS) in sys.path:
        return
    if all(importlib.util.find_spec(name) is not None for name in ("flash_attn", "vllm")):
        return
    # transformers and peft probe for flash_attn: import them before the stubs.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import peft  # noqa: F401
        import transformers.modeling_utils  # noqa: F401
    sys.path.insert(0, str(STUBS))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(STUBS), os.environ.get("PYTHONPATH")) if p
    )
