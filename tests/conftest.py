"""Shared fixtures: one ``xp`` fixture runs a test on every array backend, and ``device``
puts its arrays on a device of that backend's that is not the default where it has one."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import array_api_compat
import pytest
from hypothesis import settings

BACKENDS = ("numpy", "array_api_strict", "torch", "jax")

# The core suite gives jax two host devices (before jax starts), so the `device` fixture has
# one that is not the default. Not in a trainer's suite (ADVBUDGET_FRAMEWORK set), whose
# meshes use every device there is.
_JAX_DEVICES = "--xla_force_host_platform_device_count"
CORE_SUITE = not os.environ.get("ADVBUDGET_FRAMEWORK")
if CORE_SUITE and _JAX_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_JAX_DEVICES}=2".strip()

# Ray runs its workers at nice 15 (its worker_niceness): beside any busy process of normal
# priority they starve. Measured on 2 cores with two busy loops beside: a Ray actor that
# imports verl took 177 s (5 s on a quiet machine) and the verl plugin test timed out.
# Every Ray these tests start (in process, `ray start`, the loop runs) inherits this.
os.environ.setdefault("RAY_worker_niceness", "0")

# No property test has a deadline: hypothesis's default (200 ms an example) is a wall-clock
# limit, which a loaded or slower machine misses (seen: the budget invariance test beside a
# trainer suite). Speed is measured in benchmarks/, never asserted.
settings.register_profile("advbudget", deadline=None)
settings.load_profile("advbudget")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the workers share jax's compilations through its persistent
    cache, in a folder of this run's (jax compiles each operation anew for each shape, and
    the property tests draw many: measured, the jax part of the conformance and property
    tests on 2 workers took 162 s instead of 201). Never a folder of another run: XLA
    compiles for this machine's CPU."""
    workers = getattr(config.option, "numprocesses", None)
    if not workers or hasattr(config, "workerinput") or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    cache = tempfile.mkdtemp(prefix="advbudget-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))


def load_namespace(name: str) -> Any:
    """The Array API namespace of backend ``name``, or skip when it is not installed (a
    failure where ADVBUDGET_REQUIRE names it, as `make test` does for all four)."""
    module = pytest.importorskip({"jax": "jax.numpy"}.get(name, name))
    return array_api_compat.array_namespace(module.zeros(1))


@pytest.fixture(autouse=True)
def _restore_estimator_registry() -> Any:
    """Whatever a test registers is gone after it: registry state never leaks."""
    from advbudget.core import estimators

    state = estimators.snapshot()
    yield
    estimators.restore(state)


@pytest.fixture(params=BACKENDS)
def xp(request: pytest.FixtureRequest) -> Any:
    """Each backend's namespace; jax with x64 on for this test only (float64 references),
    so no test depends on which ran before it (tests/test_tracing.py covers x64 off)."""
    namespace = load_namespace(request.param)
    if request.param != "jax":
        yield namespace
        return
    import jax

    with jax.enable_x64(True):
        yield namespace


@pytest.fixture
def device(xp: Any) -> Any:
    """The device a test puts its arrays on: one that is not its backend's default where the
    backend has one (array_api_strict's "device1", jax's second host device, torch's CUDA
    where present), so a result that falls back to the default device fails its check;
    numpy's and a CPU-only torch's "cpu" otherwise. (torch's meta device holds no values:
    every estimator refuses it: tests/test_conformance.py.)"""
    name = xp.__name__
    if name.startswith("array_api_strict"):
        return xp.Device("device1")
    if name.startswith("jax"):
        import jax

        devices = jax.devices()
        if CORE_SUITE and len(devices) < 2:
            pytest.fail(f"jax has {len(devices)} device: XLA_FLAGS must be set before it starts")
        return devices[-1]
    if "torch" in name:
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return "cpu"
