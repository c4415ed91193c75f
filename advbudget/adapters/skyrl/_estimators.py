"""SkyRL advantage estimators: every estimator of the advbudget catalogue, by name.

SkyRL calls a registered estimator as ``fn(token_level_rewards=[B, L], response_mask=[B, L],
index=<uid of each row's prompt>, values=, grpo_norm_by_std=, gamma=, lambd=,
config=<trainer.algorithm>)`` and expects ``(advantages, returns)``, both ``[B, L]``
(``ppo_utils.compute_advantages_and_returns``). Each function here only translates:
sequence reward ``token_level_rewards.sum(-1)``, names and options from SkyRL's config, the
core's :func:`~advbudget.compute_advantages` with SkyRL's row of conventions, then
:func:`~advbudget.token_advantages`; the returns are the advantages, as SkyRL's own outcome
estimators return them. A mirror (an estimator SkyRL has too: :data:`MIRRORS`) takes exactly
the signature of SkyRL's function; the statistics after SkyRL's float32 sum are float64.

Names: ``advbudget_NAME`` for every name and alias of the catalogue, and ``reward_budget``;
estimators registered later in the process follow. ``trainer.algorithm.grpo_norm_by_std=false``
turns ``advbudget_grpo`` into Dr. GRPO, as it does SkyRL's ``grpo``.

Padding: SkyRL pads the batch to a multiple of the data-parallel size with copies of row 0
(``loss_mask`` 0, uids ``pad0``, ``pad1``, ...) and hands the estimator every row. Inside
the advbudget trainer (:func:`padding_rows`) those rows are left out of the groups and get
advantage 0 (**Choice**: they take no part in the loss, and SkyRL's metrics drop them too);
a direct call scores every row it is given, as SkyRL's estimators do.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from advbudget.core import (
    AdvantageResult,
    EstimatorSpec,
    compute_advantages,
    get_spec,
    on_register,
    token_advantages,
)

from .._features import lent_keywords, publish
from ._convention import SKYRL
from ._hooks import estimator_registry, forget_estimator, registered_estimator
from ._options import read_options

SkyrlEstimator = Callable[..., tuple[Any, Any]]


def estimator_names() -> list[str]:
    """Every SkyRL name of our estimators (the whole catalogue, plugins included)."""
    return list(SKYRL.names())


# SkyRL 0.4.0's signatures (``ppo_utils.py``): a mirror takes exactly its SkyRL estimator's
# (tests/adapters/skyrl compares them with the installed SkyRL's). Bodies never run.
def _grpo(  # type: ignore[empty-body]
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    grpo_norm_by_std: bool = True,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _rloo(  # type: ignore[empty-body]
    token_level_rewards: Any, response_mask: Any, index: Any, **kwargs: Any
) -> tuple[Any, Any]: ...


def _maxrl(  # type: ignore[empty-body]
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _catalogue(  # type: ignore[empty-body]  # every estimator SkyRL does not have
    token_level_rewards: Any, response_mask: Any, index: Any, config: Any = None, **kwargs: Any
) -> tuple[Any, Any]: ...


@dataclass(frozen=True)
class Mirror:
    """How the arguments of one of SkyRL's estimators reach its mirror.

    Attributes:
        skyrl: SkyRL's registry name (``trainer.algorithm.advantage_estimator``).
        function: its function in ``skyrl.backends.skyrl_train.utils.ppo_utils``.
        signature: SkyRL's signature, which ours takes.
        options: SkyRL argument -> the core option it sets (``epsilon`` -> ``eps``).
    """

    skyrl: str
    function: str
    signature: inspect.Signature
    options: Mapping[str, str] = field(default_factory=dict)


MIRRORS: Mapping[str, Mirror] = MappingProxyType(
    {
        "grpo": Mirror(
            "grpo", "compute_grpo_outcome_advantage", inspect.signature(_grpo), {"epsilon": "eps"}
        ),
        # SkyRL's grpo with grpo_norm_by_std=False: epsilon divides nothing there
        "dr": Mirror("grpo", "compute_grpo_outcome_advantage", inspect.signature(_grpo)),
        "rloo": Mirror("rloo", "compute_rloo_outcome_advantage", inspect.signature(_rloo)),
        "maxrl": Mirror(
            "maxrl", "compute_maxrl_advantage", inspect.signature(_maxrl), {"epsilon": "eps"}
        ),
    }
)
"""Core estimator -> its SkyRL mirror, for every estimator SkyRL has (``SKYRL.own_names``)."""

CATALOGUE_SIGNATURE = inspect.signature(_catalogue)

#: What SkyRL's ``compute_advantages_and_returns`` hands an estimator by keyword beside the
#: rewards, the mask and the index: anything else is refused, never swallowed.
SKYRL_PASSES = ("values", "grpo_norm_by_std", "gamma", "lambd", "config")


def mirror_of(name: str) -> Mirror | None:
    """The :class:`Mirror` behind SkyRL name ``name`` (None for an estimator SkyRL lacks)."""
    core = SKYRL.core_name(name)
    return MIRRORS.get(core) if SKYRL.is_mirror(core) else None


class _Padding(threading.local):
    rows: int = 0


_PADDING = _Padding()


@contextlib.contextmanager
def padding_rows(rows: int) -> Iterator[None]:
    """Within the block, the last ``rows`` rows of an estimator call in this thread are
    SkyRL's padding: left out of the groups, advantage 0 (the advbudget trainer's step)."""
    previous, _PADDING.rows = _PADDING.rows, rows
    try:
        yield
    finally:
        _PADDING.rows = previous


def core_settings(
    name: str, config: Any, arguments: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """The core estimator and its :func:`compute_advantages` keywords for SkyRL name
    ``name``: the conventions, then ``trainer.algorithm.advbudget`` from ``config``, then
    SkyRL's arguments (``epsilon``; ``grpo_norm_by_std=False`` makes grpo Dr. GRPO)."""
    arguments = dict(arguments or {})
    core = SKYRL.core_name(name)
    SKYRL.check_rewards(core, name)
    if core == "grpo" and arguments.get("grpo_norm_by_std") is False:
        core = "dr"  # SkyRL's Dr. GRPO switch
    mirror = MIRRORS.get(core) if SKYRL.is_mirror(core) else None
    spec = get_spec(core)
    overrides = read_options(config).compute_keywords(spec)
    for argument, core_option in (mirror.options if mirror else {}).items():
        if arguments.get(argument) is not None:
            overrides[core_option] = arguments[argument]
    return core, SKYRL.settings(core, overrides)


def check_inputs(name: str, spec: EstimatorSpec) -> None:
    """Refuse, in one line, an estimator that needs an input SkyRL does not pass (anything
    but the response lengths, which the mask gives)."""
    for declared in spec.inputs:
        if declared.required and declared.name != "response_lengths":
            raise ValueError(
                f"trainer.algorithm.advantage_estimator: {name} needs {declared.name} "
                f"({declared.doc}), which SkyRL does not hand an estimator (it passes the "
                "rewards, the response mask and the prompt uids)"
            )


def check_step_wise_inputs(name: str, spec: EstimatorSpec) -> None:
    """Refuse, in one line, an estimator that reads the response lengths when SkyRL runs
    step-wise trajectories: it then hands the estimator the last turns' rows with a mask of
    ones (``skyrl/train/trainer.py:1189``), so every length would be the padded width."""
    if any(declared.name == "response_lengths" for declared in spec.inputs):
        raise ValueError(
            f"trainer.algorithm.advantage_estimator: {name} reads each response's length, "
            "and with generator.step_wise_trajectories=true SkyRL hands an estimator a mask "
            "of ones, not each trajectory's tokens (skyrl/train/trainer.py:1189); choose an "
            "estimator without response lengths, or one row per trajectory"
        )


def _inputs(name: str, spec: EstimatorSpec, response_mask: Any) -> dict[str, Any]:
    check_inputs(name, spec)
    wanted = {declared.name for declared in spec.inputs}
    return {"response_lengths": response_mask.sum(-1)} if "response_lengths" in wanted else {}


def compute_result(
    name: str,
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    config: Any = None,
    arguments: Mapping[str, Any] | None = None,
) -> AdvantageResult:
    """The core's :class:`~advbudget.AdvantageResult` of SkyRL estimator ``name`` on one
    call's inputs, without the rows :func:`padding_rows` marks: what the estimator returns
    the advantages of, and what the metrics read."""
    if index is None:
        raise TypeError(f"index: {name} expected the uid of each row's prompt, got None")
    labels = list(index)
    rows = int(token_level_rewards.shape[0])
    if len(labels) != rows:
        raise ValueError(
            f"index: {name} expected one uid per row of token_level_rewards ({rows}), "
            f"got {len(labels)}"
        )
    padding = _PADDING.rows
    if not 0 <= padding < rows:
        padding = 0  # another batch than the one padded
    real = rows - padding
    core, settings = core_settings(name, config, arguments)
    spec = get_spec(core)
    torch = sys.modules["torch"]
    sequence_reward = token_level_rewards[:real].sum(-1).to(torch.float64)
    inputs = _inputs(name, spec, response_mask[:real])
    memory = lent_keywords(
        spec,
        real,
        "SkyRL's own entry point lends none: run advbudget's "
        "(python -m advbudget.adapters.skyrl, or trainer.override_entrypoint="
        "advbudget.adapters.skyrl.main)",
    )
    return compute_advantages(
        sequence_reward, core, group_ids=labels[:real], **settings, **inputs, **memory
    )


_FUNCTIONS: dict[str, SkyrlEstimator] = {}


def estimator_function(name: str) -> SkyrlEstimator:
    """The function SkyRL calls for our estimator ``name`` (one per name, made once)."""
    SKYRL.core_name(name)  # an unknown name fails here
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = _make(name)
    return _FUNCTIONS[name]


def _make(name: str) -> SkyrlEstimator:
    mirror = mirror_of(name)
    signature = mirror.signature if mirror else CATALOGUE_SIGNATURE

    def estimator(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        given = signature.bind(*args, **kwargs).arguments  # Python's TypeError if not
        return _estimate(name, dict(given))

    spec = get_spec(SKYRL.core_name(name))
    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__signature__ = signature  # type: ignore[attr-defined]
    like = f"SkyRL's ``{mirror.skyrl}``" if mirror else "SkyRL's outcome estimators"
    estimator.__doc__ = (
        f"SkyRL estimator ``{name}``: {spec.formula} ({spec.reference}).\n\n"
        f"Takes the arguments of {like} (see :data:`MIRRORS`), by position or keyword:\n"
        "    token_level_rewards: ``[B, L]``; the sequence reward is the sum over L.\n"
        "    response_mask: ``[B, L]``; the advantage is broadcast over it.\n"
        "    index: ``[B]`` uids (the prompt groups).\n"
        "    config: SkyRL's ``trainer.algorithm`` (options: ``advbudget.<option>``).\n"
        f"    and by keyword what SkyRL's dispatch passes ({', '.join(SKYRL_PASSES)}); any\n"
        "    other keyword is a TypeError.\n\n"
        "Returns:\n"
        "    ``(advantages, returns)``, ``[B, L]``, the same tensor, in the dtype of\n"
        "    token_level_rewards.\n"
    )
    return estimator


def _estimate(name: str, given: dict[str, Any]) -> tuple[Any, Any]:
    """One call of our SkyRL estimator ``name``, from its bound arguments."""
    extra = given.pop("kwargs", {})
    unknown = [key for key in extra if key not in SKYRL_PASSES]
    if unknown:
        raise TypeError(
            f"{name} got an unexpected keyword argument {unknown[0]!r} (it takes what "
            f"SkyRL's compute_advantages_and_returns passes: {', '.join(SKYRL_PASSES)}; "
            "anything else would be ignored, so it is refused)"
        )
    rewards, mask = given.pop("token_level_rewards"), given.pop("response_mask")
    index = given.pop("index")
    config = given.pop("config", extra.get("config"))
    arguments = {**extra, **given}
    result = compute_result(name, rewards, mask, index, config, arguments)
    publish(result)  # to the advbudget trainer's step, which runs after SkyRL's call
    torch = sys.modules["torch"]
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    advantages = torch.as_tensor(result.advantages, device=rewards.device)
    padding = int(rewards.shape[0]) - int(advantages.shape[0])
    if padding:
        advantages = torch.cat([advantages, advantages.new_zeros(padding)])
    tokens = token_advantages(advantages, mask).to(dtype)
    return tokens, tokens


def register_estimators() -> list[str]:
    """Register every catalogue estimator in SkyRL's ``AdvantageEstimatorRegistry``;
    returns the names.

    Idempotent: SkyRL raises on a name registered twice, so our own earlier functions (an
    earlier import, the re-import that unpickling one of them causes in SkyRL's Ray
    workers) are replaced; a name taken by anything else raises. Estimators registered with
    advbudget later in this process are registered with SkyRL as they come.
    """
    names = estimator_names()
    for name in names:
        _register_with_skyrl(name)
    on_register(_on_new_estimator)
    return names


def _register_with_skyrl(name: str) -> None:
    fn = estimator_function(name)
    existing = registered_estimator(name)
    if existing is not None:
        if getattr(existing, "__qualname__", None) != fn.__qualname__:
            raise ValueError(
                f"estimator: {name!r} is already registered in SkyRL by "
                f"{getattr(existing, '__module__', '?')}; advbudget will not replace it"
            )
        forget_estimator(name)  # ours, from an earlier import or spec
    estimator_registry().register(name, fn)


def _on_new_estimator(spec: EstimatorSpec) -> None:
    for alias in spec.names:
        _FUNCTIONS.pop(SKYRL.name_of(alias), None)  # a replaced estimator: a fresh function
        _register_with_skyrl(SKYRL.name_of(alias))
