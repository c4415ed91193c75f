"""Shared pieces of the OpenRLHF adapter tests (their ``Experience`` objects and experience
maker: :mod:`advbudget.adapters.openrlhf.testing`).

On a CPU machine ``flash_attn`` and ``vllm`` do not install; OpenRLHF's trainer modules
import them at module level, so the import stubs in ``stubs/`` go on ``sys.path`` (and on
PYTHONPATH, for subprocesses and Ray workers) when OpenRLHF is installed without them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from advbudget.adapters.openrlhf.testing import experience_maker_module

from .contract import use_import_stubs

collect_ignore = ["stubs", "cpu_loop"]  # cpu_loop: a sitecustomize, never imported here

STUBS = Path(__file__).parent / "stubs"

use_import_stubs()  # before any OpenRLHF import below or in a test module

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


# Several Ray sessions start and stop in this process (the fixtures above, test_kappa,
# test_patch, test_plugin). Ray does not support that cleanly (ray-project/ray#31145: its
# threads may reach a shut-down core worker), and CI once saw this suite's interpreter
# segfault after pytest had printed "504 passed" (exit 139, a fresh-clone CI run): in the
# interpreter's own teardown, after pytest's last hook. So the suite leaves, after that
# last hook, with pytest's own exit status and without the teardown; test results,
# failures included, are unchanged.
_SESSIONS: list[pytest.Session] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    _SESSIONS.append(session)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSIONS and "ray" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(_SESSIONS[-1].exitstatus))
