"""Shared pieces of the OpenRLHF adapter tests (their ``Experience`` objects and experience
maker: :mod:`advbudget.testing.openrlhf`).

On a CPU machine ``flash_attn`` and ``vllm`` do not install; OpenRLHF's trainer modules
import them at module level, so the import stubs in ``stubs/`` go on ``sys.path`` (and on
PYTHONPATH, for subprocesses and Ray workers) when OpenRLHF is installed without them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from advbudget.testing.openrlhf import experience_maker_module

collect_ignore = ["stubs", "cpu_loop"]  # cpu_loop: a sitecustomize, never imported here

STUBS = Path(__file__).parent / "stubs"
if importlib.util.find_spec("openrlhf") is not None:
    for _name in ("flash_attn", "vllm"):
        if importlib.util.find_spec(_name) is None:
            # transformers and peft probe for flash_attn: import them before the stubs.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import peft  # noqa: F401
                import transformers.modeling_utils  # noqa: F401
            sys.path.insert(0, str(STUBS))
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(STUBS), os.environ.get("PYTHONPATH")) if p
            )
            break

# OpenRLHF, deepspeed and torch.jit warn at import and at first use; Ray leaves an unclosed
# /dev/null that the garbage collector reports at a random later test (seen once).
OPENRLHF_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning",
    "ignore::DeprecationWarning",
    "ignore::FutureWarning",
    "ignore::ResourceWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)


def import_openrlhf() -> Any:
    """The experience-maker module (skips without OpenRLHF)."""
    pytest.importorskip("openrlhf")
    return experience_maker_module()


@pytest.fixture(scope="module")
def local_ray():  # type: ignore[no-untyped-def]
    """A local one-CPU Ray with the adapter's setup hook installed, for one test module
    (test_kappa.py keeps its own: it runs without the hook)."""
    import ray

    import advbudget.adapters.openrlhf as adapter

    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    adapter.install()
    yield
    adapter.uninstall()
    ray.shutdown()
