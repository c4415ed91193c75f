"""Test helpers for code built on advbudget (plugins, adapters, new backends).

:func:`assert_close` is the check the library's own tests use: an estimator that returns
the right numbers in the wrong namespace, dtype or device is wrong, so those are checked
by default, not only the values. :func:`rounding_tolerance` is the tolerance for results
of long sums (gradients, log-prob sums), whose rounding depends on the machine.

Each framework's submodule builds that framework's own batch objects, as its trainer hands
them to an advantage estimator, for tests and benchmarks of the adapters:
:mod:`advbudget.testing.verl` (a ``DataProto``), :mod:`advbudget.testing.openrlhf`
(``Experience`` objects and a ``RemoteExperienceMaker``), :mod:`advbudget.testing.trl`
(a tiny CPU ``GRPOConfig``/``RLOOConfig``). Each imports its framework only when a
function runs, so ``import advbudget.testing`` imports none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import array_api_compat
import numpy as np

from ..core._arrays import device_of, to_host

__all__ = ["assert_close", "assert_memory_replays", "rounding_tolerance", "to_numpy"]

_UNSET: Any = object()


def to_numpy(x: Any) -> np.ndarray[Any, Any]:
    """``x`` (any namespace, any device) as a numpy array on the host."""
    return to_host(x)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    xp: Any = None,
    like: Any = None,
    dtype: Any = _UNSET,
    device: Any = _UNSET,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Assert that ``actual`` is ``expected``: its namespace, dtype, device, shape and values.

    ``expected`` is an array (its namespace, dtype and device are then the expected ones
    unless given) or a float64 reference (a list, a numpy array of another namespace's
    result). With a reference, ``like`` is the array whose namespace, dtype and device the
    result must keep (typically the rewards that went in); or pass ``xp`` for the namespace
    and ``dtype``/``device`` to check them. Tolerances default to 1e-12 for float64 results
    and 2e-5 (relative) / 2e-6 (absolute) otherwise.

    Examples:
        >>> import numpy as np
        >>> from advbudget import budget_advantage
        >>> from advbudget.testing import assert_close
        >>> rewards = np.array([1.0, 0.0, 0.0, 0.0])
        >>> advantages = budget_advantage(rewards, group_size=4)
        >>> assert_close(advantages, [0.75, -0.25, -0.25, -0.25], like=rewards)
        >>> assert_close(advantages, [0.75, -0.25, -0.25, -0.25], like=rewards.astype(np.float32))
        Traceback (most recent call last):
        ...
        AssertionError: dtype float64, expected float32
    """
    __tracebackhide__ = True
    if like is not None:
        if xp is not None:
            raise TypeError("assert_close: pass like= or xp=, not both (like sets the namespace)")
        xp = array_api_compat.array_namespace(like)
        dtype = like.dtype if dtype is _UNSET else dtype
        device = device_of(like) if device is _UNSET else device
    reference_is_array = array_api_compat.is_array_api_obj(expected) and not isinstance(
        expected, (list, tuple)
    )
    namespace = _canonical(xp) if xp is not None else None
    if namespace is None and reference_is_array:
        namespace = array_api_compat.array_namespace(expected)
    if namespace is not None:
        got = array_api_compat.array_namespace(actual)
        _require(got is namespace, f"namespace {got.__name__}, expected {namespace.__name__}")
    same_kind = reference_is_array and (
        namespace is None or array_api_compat.array_namespace(expected) is namespace
    )
    if dtype is _UNSET and same_kind:
        dtype = expected.dtype
    if dtype is not _UNSET and dtype is not None:
        _require(actual.dtype == dtype, f"dtype {actual.dtype}, expected {dtype}")
    if device is _UNSET and same_kind:
        device = device_of(expected)
    if device is not _UNSET and device is not None:
        _require(device_of(actual) == device, f"device {device_of(actual)}, expected {device}")
    values = to_numpy(actual)
    reference = np.asarray(to_numpy(expected) if reference_is_array else expected, np.float64)
    _require(values.shape == reference.shape, f"shape {values.shape}, expected {reference.shape}")
    if rtol is None:
        rtol = 1e-12 if values.dtype == np.float64 else 2e-5
    if atol is None:
        atol = 1e-12 if values.dtype == np.float64 else 2e-6
    np.testing.assert_allclose(values, reference, rtol=rtol, atol=atol)


def rounding_tolerance(
    expected: Any, *, terms: int, dtype: Any = None, slack: float = 4.0
) -> float:
    """An absolute tolerance for comparing results of long sums: ``slack · terms · eps ·
    max|expected|``, the classic bound on the rounding of a sum of ``terms`` addends,
    taken against the result's largest element.

    For gradients, log-prob sums and other results of matrix products: how such a sum is
    ordered depends on the batch's shape, the CPU's kernels and the thread count, so two
    computations that are equal in exact arithmetic agree only to this bound, not to a few
    ulps of each element (an element much smaller than the largest carries the rounding of
    the large addends that cancelled in it). ``dtype`` is the dtype the sums accumulate in
    (``expected``'s by default; pass ``float32`` where a kernel accumulates in it whatever
    its inputs). A difference that the tolerance must still catch (a wrong normaliser, a
    row left in) is a relative change of order one at that scale, far above it.

    Examples:
        >>> import numpy as np
        >>> from advbudget.testing import rounding_tolerance
        >>> tolerance = rounding_tolerance(np.array([2.0, -0.5]), terms=1000)
        >>> tolerance == 4 * 1000 * 2.0**-52 * 2.0  # slack 4, float64's eps, the largest |x|
        True
    """
    if terms < 1:
        raise ValueError(f"terms: expected a positive count of addends, got {terms}")
    values = to_numpy(expected)
    accumulation = values.dtype if dtype is None else _numpy_dtype(dtype)
    if not np.issubdtype(accumulation, np.floating):
        raise ValueError(f"dtype: expected a floating dtype to accumulate in, got {accumulation}")
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    return slack * terms * float(np.finfo(accumulation).eps) * scale


def assert_memory_replays(
    calls: Sequence[Mapping[str, Any]],
    estimator: str,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    **options: Any,
) -> None:
    """Check a run of an estimator with memory (``spo``, ``rae``) against the core: each
    call (``{"prompt_ids": [...], "rewards": [...], "advantages": [...]}``, and spo's
    per-row ``"rho"`` when the run measured it, in the run's order, a resume's calls after
    the run it resumed) must equal
    :func:`~advbudget.compute_advantages` on one :class:`~advbudget.EstimatorState` fed
    the calls before it, as an uninterrupted run computes them; and the last call must
    differ from the same call on a fresh state (else the check could not see a memory
    lost on the way, e.g. by a resume)."""
    from .. import EstimatorState, compute_advantages

    def scored(call: Mapping[str, Any], memory: EstimatorState) -> Any:
        rewards = np.asarray(call["rewards"], dtype=np.float64)
        rho: dict[str, Any] = {"rho": np.asarray(call["rho"])} if "rho" in call else {}
        return compute_advantages(
            rewards, estimator, group_size=1, prompt_ids=call["prompt_ids"], state=memory,
            **options, **rho,
        ).advantages  # fmt: skip

    state, fresh = EstimatorState(), None
    for number, call in enumerate(calls):
        fresh = scored(call, EstimatorState())
        np.testing.assert_allclose(
            call["advantages"], scored(call, state), rtol=rtol, atol=atol,
            err_msg=f"call {number}: not the advantages of an uninterrupted run",
        )  # fmt: skip
    if fresh is not None and np.allclose(calls[-1]["advantages"], fresh, rtol=rtol, atol=atol):
        raise AssertionError(
            "the last call equals a call on a fresh state: it cannot tell a memory kept from "
            "one lost"
        )


def _numpy_dtype(dtype: Any) -> Any:
    """A numpy, jax or torch dtype as numpy's (``torch.float32`` -> ``float32``)."""
    try:
        return np.dtype(dtype)
    except TypeError:  # torch's dtypes are not numpy's
        return np.dtype(str(dtype).removeprefix("torch."))


def _canonical(xp: Any) -> Any:
    """The namespace array_api_compat gives arrays of ``xp`` (``numpy`` and
    ``array_api_compat.numpy`` are one namespace here)."""
    return array_api_compat.array_namespace(xp.asarray(0))


def _require(condition: bool, message: str) -> None:
    # not `assert`: the checks must hold under `python -O` too
    if not condition:
        raise AssertionError(message)
