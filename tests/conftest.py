"""Shared fixtures: one ``xp`` fixture runs a test on every array backend."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import array_api_compat
import pytest
from hypothesis import settings

from advbudget import testing
from advbudget.testing import to_numpy  # noqa: F401  (the tests import it from here)

BACKENDS = ("numpy", "array_api_strict", "torch", "jax")

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


def assert_close(
    actual: Any,
    expected: Any,
    *,
    xp: Any,
    rtol: float | None = None,
    atol: float | None = None,
    dtype: Any = None,
) -> None:
    """:func:`advbudget.testing.assert_close` against a host float64 reference: namespace,
    shape and values; the dtype when given."""
    __tracebackhide__ = True
    testing.assert_close(actual, expected, xp=xp, dtype=dtype, device=None, rtol=rtol, atol=atol)
