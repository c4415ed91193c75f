"""verl advantage estimators: every estimator of the advbudget catalogue, by name.

verl calls a registered estimator as ``fn(token_level_rewards=[B, L], response_mask=[B, L],
config=<config.algorithm>, index=<numpy object array of uid strings>, **extra)`` and expects
``(advantages, returns)``, both ``[B, L]``. Each function here only translates: sequence
reward ``token_level_rewards.sum(-1)``, names and options from verl's config, the core's
:func:`~advbudget.compute_advantages` with the verl row of the conventions table
(:data:`advbudget.core.CONVENTIONS`), then :func:`~advbudget.token_advantages`. A mirror
(an estimator verl has too: :data:`MIRRORS`) takes exactly the signature of verl's
function, so a direct call means the same to both; the statistics after verl's own sum
are float64.

Names: ``advbudget_NAME`` for every name and alias of the catalogue (``advbudget_budget``,
``advbudget_grpo``, ``advbudget_opo``, a plugin's ``advbudget_mine``, ...), and
``reward_budget``. Estimators registered later in the process (``register_estimator``)
are registered with verl too; in verl's Ray workers, an ``advbudget.estimators`` entry
point makes a plugin's estimator exist there.

Options (all under ``algorithm`` in verl's config; own keys need a ``+`` on the command
line, e.g. ``+algorithm.advbudget.budget=0.5``):

- ``advbudget.<option>``: any option of the chosen estimator (``budget``, ``eps``,
  ``std_correction``, a plugin's own; see ``docs/estimators.md``);
- ``advbudget.tie_rtol`` / ``advbudget.tie_atol``: the core's tie tolerance;
- ``advbudget.nan_policy``: ``raise`` (default: a NaN reward stops the step, naming the
  rollout) or ``omit`` (left out of its group, advantage 0; ``advbudget/nan_reward_fraction``
  in the metrics);
- ``advbudget.solved_reward`` (metrics only, default 1.0): a response whose sequence reward
  reaches it (within the tie tolerance) is solved, for ``advbudget/unsolved_group_fraction``
  and ``advbudget/solved_group_fraction``; ``null`` leaves the two keys out;
- ``advbudget.skipped_groups`` (``keep``, default; ``drop`` or ``resample`` with the
  ``advbudget_*`` trainers) and ``advbudget.max_generation_batches`` (resample's cap, default
  10): see :mod:`advbudget.adapters.verl._skipped` and :mod:`advbudget.adapters.verl._resample`;
- ``advbudget.max_staleness`` / ``advbudget.stale_rollouts`` (``keep``, default;
  ``baseline_only``, ``drop``, ``drop_group``): the core's staleness rule, in verl's async
  trainers (each rollout's policy version from verl's batch: :mod:`._staleness`); refused
  in the others, whose rollouts are never stale;
- ``norm_adv_by_std_in_grpo`` (verl's own, default True): ``advbudget_grpo`` divides by the
  group std only when it is True; False gives Dr.GRPO's ``r - mean``, as verl's ``grpo``.

Conventions: estimators verl also has (``grpo``, ``rloo``, ...) keep verl's (a group of one
is scored against mean 0 and std 1, exact ties, eps 1e-6; ``grpo_passk`` raises ValueError
on a group of one, as verl's; ``remax`` and ``reinforce`` (verl's ``reinforce_plus_plus``)
are per token, as verl's: the reward-to-go of every token, at ``algorithm.gamma`` for
``reinforce``, observation spans skipped, and it is their returns);
the others the core's (a group of one, or with rewards within 1e-6, is skipped). Rows whose
response mask is all zero still count in their group, as in verl. Extra inputs:
``response_lengths`` is the response mask's row sum; any other input is taken from what
verl passes by that name (``reward_baselines``; missing, a TypeError as verl's own remax).

Reward components (``advbudget_gdpo``): read as verl's own ``gdpo`` reads them,
``non_tensor_batch[key]`` for each key of ``algorithm.gdpo_reward_keys`` (the keys of the
dict ``compute_score`` returns beside ``score``: verl's reward loop puts each key of its
``reward_extra_info`` in ``non_tensor_batch``), weighted by ``algorithm.gdpo_reward_weights``
(``advbudget.weights`` overrides it); ``token_level_rewards`` is not used. verl's
``compute_advantage`` hands ``non_tensor_batch`` to its own ``gdpo`` only, so ours read it
from the ``data`` of that call (:func:`._hooks.compute_advantage_data`). verl 0.9.1's v1
trainer does not fetch those keys for the advantage step (nor for verl's ``gdpo``):
components reach the estimator with the legacy trainer (``trainer.use_v1=False``).

Multi-output agent loops (verl's V1 trainer: an agent loop that returns several outputs
for one rollout, e.g. one per assistant turn): verl's advantage step counts each session
once for its own ``grpo`` only, and hands every other estimator each output as a rollout.
Ours read the step's batch keys from its frame (:func:`._hooks.multi_output_keys`) and
count each session once (:mod:`._sessions`): one reward per session, its final output's,
grouped by prompt, the session's advantage on every output's response tokens, as verl's
grpo broadcasts it. With one output per session (verl's ``single_turn_agent`` and
``tool_agent`` loops) nothing changes.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from advbudget.core import (
    EstimatorSpec,
    compute_advantages,
    get_spec,
    on_register,
    reward_to_go,
    token_advantages,
    whiten_tokens,
)

from .._features import lent_keywords, lent_versions, publish
from ._convention import VERL
from ._hooks import compute_advantage_data, estimator_registry, multi_output_keys
from ._options import option, read_options
from ._sessions import Sessions, final_rewards, read_keys
from ._staleness import log_async_metrics, staleness_keywords

VerlEstimator = Callable[..., tuple[Any, Any]]


def estimator_names() -> list[str]:
    """Every verl name of our estimators (the whole catalogue, plugins included)."""
    return list(VERL.names())


# verl 0.9.1's signatures (``verl/trainer/ppo/core_algos.py``): a mirror takes exactly its
# verl estimator's, so a call written for verl's function means the same to ours, by
# position and by keyword (tests/adapters/verl/test_signatures.py compares them with the
# installed verl's). Bodies are never run: only their signatures are read.
def _grpo(  # type: ignore[empty-body]
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[Any, Any]: ...


def _gdpo(  # type: ignore[empty-body]
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    non_tensor_batch: Any = None,
    batch: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _grpo_passk(  # type: ignore[empty-body]
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _grouped(  # type: ignore[empty-body]  # rloo, opo, reinforce_plus_plus_baseline
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _gpg(  # type: ignore[empty-body]
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _reinforce_plus_plus(  # type: ignore[empty-body]
    token_level_rewards: Any, response_mask: Any, config: Any = None, **kwargs: Any
) -> tuple[Any, Any]: ...


def _remax(  # type: ignore[empty-body]
    token_level_rewards: Any,
    reward_baselines: Any,
    response_mask: Any,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


def _catalogue(  # type: ignore[empty-body]  # every estimator verl does not have
    token_level_rewards: Any,
    response_mask: Any,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]: ...


@dataclass(frozen=True)
class Mirror:
    """How the arguments of one of verl's estimators reach its mirror.

    Attributes:
        verl: verl's registry name (``algorithm.adv_estimator``).
        function: its function in ``verl.trainer.ppo.core_algos``.
        signature: verl's signature, which ours takes.
        options: verl argument -> the core option it sets (``epsilon`` -> ``eps``).
        unused: arguments verl's function takes and never reads (gpg's ``alpha``): ours
            accepts them and does the same.
        tokens: ``""`` (one advantage per response, broadcast over its tokens), or the
            per-token estimator verl computes: ``"reinforce"`` (the reward-to-go at
            ``algorithm.gamma``, whitened over the batch's tokens) or ``"remax"`` (the
            reward-to-go minus the greedy rollout's reward).
    """

    verl: str
    function: str
    signature: inspect.Signature
    options: Mapping[str, str] = field(default_factory=dict)
    unused: tuple[str, ...] = ()
    tokens: str = ""


MIRRORS: Mapping[str, Mirror] = MappingProxyType(
    {
        "grpo": Mirror(
            "grpo", "compute_grpo_outcome_advantage", inspect.signature(_grpo), {"epsilon": "eps"}
        ),
        # verl's grpo with norm_adv_by_std_in_grpo=False: epsilon divides nothing there
        "dr": Mirror(
            "grpo", "compute_grpo_outcome_advantage", inspect.signature(_grpo), unused=("epsilon",)
        ),
        "gdpo": Mirror(
            "gdpo", "compute_gdpo_outcome_advantage", inspect.signature(_gdpo), {"epsilon": "eps"}
        ),
        "grpo_passk": Mirror(
            "grpo_passk",
            "compute_grpo_passk_outcome_advantage",
            inspect.signature(_grpo_passk),
            {"epsilon": "eps"},
        ),
        "rloo": Mirror(
            "rloo",
            "compute_rloo_outcome_advantage",
            inspect.signature(_grouped),
            unused=("epsilon",),
        ),
        "opo": Mirror(
            "opo", "compute_opo_outcome_advantage", inspect.signature(_grouped), unused=("epsilon",)
        ),
        "reinforce_plus_plus_baseline": Mirror(
            "reinforce_plus_plus_baseline",
            "compute_reinforce_plus_plus_baseline_outcome_advantage",
            inspect.signature(_grouped),
            unused=("epsilon",),  # verl's whitening has its own 1e-8
        ),
        "gpg": Mirror(
            "gpg",
            "compute_gpg_outcome_advantage",
            inspect.signature(_gpg),
            {"f_norm": "f_norm"},
            unused=("epsilon", "alpha"),  # verl recomputes alpha from the batch
        ),
        "reinforce": Mirror(
            "reinforce_plus_plus",
            "compute_reinforce_plus_plus_outcome_advantage",
            inspect.signature(_reinforce_plus_plus),
            tokens="reinforce",
        ),
        "remax": Mirror(
            "remax",
            "compute_remax_outcome_advantage",
            inspect.signature(_remax),
            tokens="remax",
        ),
    }
)
"""Core estimator -> its verl mirror, for every estimator verl has (``VERL.own_names``)."""

CATALOGUE_SIGNATURE = inspect.signature(_catalogue)

# What verl's compute_advantage (ray_trainer.py, 0.9.1) hands an estimator by keyword
# beside token_level_rewards, response_mask and config: anything else given to a
# ``**kwargs`` of ours is refused, never swallowed.
VERL_PASSES = ("index", "reward_baselines", "non_tensor_batch", "batch")


def mirror_of(name: str) -> Mirror | None:
    """The :class:`Mirror` behind verl name ``name`` (None for an estimator verl lacks)."""
    core = VERL.core_name(name)
    return MIRRORS.get(core) if VERL.is_mirror(core) else None


def verl_mirrors() -> dict[str, str]:
    """verl's own estimator name -> the verl name of its mirror (``grpo`` ->
    ``advbudget_grpo``, ``reinforce_plus_plus`` -> ``advbudget_reinforce``)."""
    return {m.verl: VERL.name_of(core) for core, m in MIRRORS.items() if core != "dr"}


def core_settings(
    name: str, config: Any, arguments: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """The core estimator and its :func:`compute_advantages` keywords for verl name ``name``:
    the conventions, then ``advbudget.<option>`` from ``config``, then the verl arguments
    given explicitly (``arguments``: ``epsilon``, ``norm_adv_by_std_in_grpo``, ...)."""
    arguments = dict(arguments or {})
    core = VERL.core_name(name)
    mirror = MIRRORS.get(core) if VERL.is_mirror(core) else None
    # norm_adv_by_std_in_grpo: the argument when given, else the config's (verl's trainer
    # passes it to its grpo from there, and our estimators get only the config).
    switch = arguments.get("norm_adv_by_std_in_grpo")
    if core == "gdpo" and switch is not None and not switch:
        raise ValueError(
            f"norm_adv_by_std_in_grpo: {name} divides each component by its group std; "
            "False (verl's gdpo without it) is not supported, got False"
        )
    if core == "dr" and switch:
        raise ValueError(
            f"norm_adv_by_std_in_grpo: {name} is Dr.GRPO (no division by the group std): "
            "expected False or nothing, got True (advbudget_grpo divides)"
        )
    if switch is None and core != "gdpo":  # verl's trainer never hands its gdpo the switch
        switch = option(config, "norm_adv_by_std_in_grpo", None)
    if core == "grpo" and switch is not None and not switch:
        core = "dr"  # verl's Dr.GRPO switch
        mirror = MIRRORS["dr"]
    spec = get_spec(core)
    overrides: dict[str, Any] = {}
    if spec.option("norm_adv_by_std") is not None and switch is not None:  # grpo_passk
        overrides["norm_adv_by_std"] = bool(switch)
    overrides.update(read_options(config).compute_keywords(spec))
    weights = option(config, "gdpo_reward_weights", None)  # verl's own key for gdpo's w_k
    if spec.components and weights is not None:
        overrides.setdefault("weights", list(weights))
    for argument, core_option in (mirror.options if mirror else {}).items():
        if arguments.get(argument) is not None:
            overrides[core_option] = arguments[argument]
    return core, VERL.settings(core, overrides)


def _inputs(
    name: str, spec: EstimatorSpec, response_mask: Any, extra: Mapping[str, Any]
) -> dict[str, Any]:
    out = {}
    for declared in spec.inputs:
        if declared.name == "response_lengths":
            out[declared.name] = response_mask.sum(-1)
        elif extra.get(declared.name) is not None:
            out[declared.name] = extra[declared.name]
        elif declared.required:  # verl's own function misses an argument: a TypeError too
            raise TypeError(
                f"{declared.name}: {name} expected one value per response in verl's batch "
                f"({declared.doc}), got none"
            )
    return out


def reward_components(name: str, config: Any, non_tensor_batch: Any, like: Any) -> dict[str, Any]:
    """``{key: [B] tensor}`` for each key of ``algorithm.gdpo_reward_keys``, from verl's
    ``non_tensor_batch`` (None becomes NaN), on the device and in the dtype of ``like``."""
    keys = option(config, "gdpo_reward_keys", None)
    if not keys:
        raise ValueError(
            f"algorithm.gdpo_reward_keys: {name} needs the keys of the reward components "
            "(those of the dict compute_score returns; on verl's command line "
            f"+algorithm.gdpo_reward_keys=[format_reward,accuracy_reward]), got {keys!r}"
        )
    available = [] if non_tensor_batch is None else list(non_tensor_batch.keys())
    missing = [key for key in keys if key not in available]
    if missing:
        raise ValueError(
            f"non_tensor_batch: {name} expected the reward components of "
            f"algorithm.gdpo_reward_keys={list(keys)}, got no {missing[0]!r} among "
            f"{available} (compute_score must return a dict with it; verl's v1 trainer "
            "passes none to the advantage step, for its own gdpo either: "
            "trainer.use_v1=False)"
        )
    torch = sys.modules["torch"]
    return {
        key: torch.as_tensor(np.asarray(non_tensor_batch[key], dtype=np.float64)).to(
            device=like.device, dtype=like.dtype
        )
        for key in keys
    }


def _float64(values: Any) -> Any:
    """A torch tensor in float64 (the mirrors compute there: at least as accurate as verl's
    float32 code); anything else as it is."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(values, torch.Tensor):
        return values.to(torch.float64)
    return values


def compute_result(
    name: str,
    token_level_rewards: Any,
    index: Any,
    config: Any = None,
    response_mask: Any = None,
    non_tensor_batch: Any = None,
    *,
    arguments: Mapping[str, Any] | None = None,
    sessions: Sessions | None = None,
    **extra: Any,
) -> Any:
    """The core's :class:`~advbudget.core.AdvantageResult` for verl estimator ``name``, one
    advantage per response, computed in float64 (torch inputs).

    Shared by the estimators and the metrics, so both see the same advantages.
    ``arguments``: verl's own arguments given explicitly (:func:`core_settings`). ``index``
    None: each response its own group, for the estimators whose verl function takes no
    index (remax, reinforce_plus_plus); the others raise. ``sessions``: the rows' sessions
    (:mod:`._sessions`; by default read from the keys of verl's V1 advantage step when it is
    the caller, :func:`._hooks.multi_output_keys`, a bad key a ValueError): when a session
    has several outputs, each session is one trajectory, scored once with its final
    output's reward, its advantage on every output.

    Examples:
        >>> import numpy as np
        >>> rewards = np.array([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
        >>> uids = np.array(["a", "a", "b", "b"], dtype=object)
        >>> compute_result("reward_budget", rewards, uids).advantages
        array([ 0.5, -0.5,  0. ,  0. ])
    """
    core, settings = core_settings(name, config, arguments)
    if getattr(token_level_rewards, "ndim", None) != 2:
        raise ValueError(
            "token_level_rewards: expected shape [B, L], "
            f"got {tuple(getattr(token_level_rewards, 'shape', ()))}"
        )
    size = token_level_rewards.shape[0]
    mirror = mirror_of(name)
    uids = index
    if index is None:
        if mirror is None or "index" in mirror.signature.parameters:
            raise ValueError(
                f"index: {name} needs verl's uid of each response "
                "(non_tensor_batch['uid']), got None"
            )
        index = np.arange(size)
    if len(index) != size:
        raise ValueError(f"index: expected one uid per response ({size}), got {len(index)}")
    spec = get_spec(core)
    if response_mask is None and any(i.name == "response_lengths" for i in spec.inputs):
        raise ValueError(f"response_mask: {name} needs the response mask [B, L], got None")
    # The sequence reward is verl's own sum (the same op in the same dtype: the same
    # number); every statistic after it in float64.
    sequence_reward = _float64(token_level_rewards.sum(-1))
    inputs = {k: _float64(v) for k, v in _inputs(name, spec, response_mask, extra).items()}
    scores: Any
    if spec.components:
        given = non_tensor_batch
        if given is None:  # verl's compute_advantage passes it to its own gdpo only
            given = getattr(compute_advantage_data(), "non_tensor_batch", None)
        if given is not None or option(config, "gdpo_reward_keys", None):
            # verl's gdpo requires the components of a batch that has non_tensor_batch
            scores = reward_components(name, config, given, sequence_reward)
        else:  # no components given: verl's gdpo takes the sequence reward as the only one
            scores = {"reward": sequence_reward}
            settings.pop("weights", None)
    else:
        scores = sequence_reward
    memory = lent_keywords(
        spec,
        size,
        "verl hands an estimator no prompt identity: run an advbudget trainer mode "
        "(trainer.v1.trainer_mode=advbudget_sync), which lends it each row's prompt",
    )
    if any(prompt is None for prompt in memory.get("prompt_ids", ())):
        scores, settings = padding_left_out(scores, memory["prompt_ids"], settings)
    # Versions lent by a caller, else those of verl's async advantage step we run under.
    versions = lent_versions(size) or staleness_keywords(read_options(config), size)
    if sessions is None:
        keys = multi_output_keys()
        sessions = None if keys is None else read_keys(keys, uids)
    trajectories: dict[str, Any] = {}
    if sessions is not None and sessions.split:  # one reward a session: its final output's
        if len(sessions.trajectory_ids) != size:
            raise ValueError(
                f"sessions: expected one per response ({size}), got {len(sessions.trajectory_ids)}"
            )
        scores = final_rewards(scores, sessions.final)
        trajectories["trajectory_ids"] = sessions.trajectory_ids
    return compute_advantages(
        scores, core, group_ids=index, **settings, **inputs, **memory, **versions, **trajectories
    )


def padding_left_out(
    scores: Any, row_prompts: list[Any], settings: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """An estimator with memory leaves verl's padding rows out (the rows the trainer lends
    no prompt: no-op samples with reward 0 that copy the first real row's prompt): as
    rewards that are not there (NaN, ``nan_policy="omit"``), so they neither count as that
    prompt's failures nor enter spo's batch statistics. Under ``nan_policy="raise"`` a
    NaN among the real rows is still the core's error.

    Examples:
        >>> import torch
        >>> scores, settings = padding_left_out(torch.tensor([1.0, 0.0, 0.0]), ["a", "b", None], {})
        >>> scores.tolist(), settings
        ([1.0, 0.0, nan], {'nan_policy': 'omit'})
    """
    import torch

    padding = torch.tensor([prompt is None for prompt in row_prompts])
    if settings.get("nan_policy", "raise") == "raise" and bool(scores[~padding].isnan().any()):
        return scores, settings  # the core refuses the real NaN
    return scores.masked_fill(padding, float("nan")), {**settings, "nan_policy": "omit"}


_FUNCTIONS: dict[str, VerlEstimator] = {}


def estimator_function(name: str) -> VerlEstimator:
    """The function verl calls for our estimator ``name`` (one per name, made once)."""
    VERL.core_name(name)  # an unknown name fails here
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = _make(name)
    return _FUNCTIONS[name]


def _make(name: str) -> VerlEstimator:
    mirror = mirror_of(name)
    signature = mirror.signature if mirror else CATALOGUE_SIGNATURE

    def estimator(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        given = signature.bind(*args, **kwargs).arguments  # Python's TypeError if not
        return _estimate(name, mirror, dict(given))

    spec = get_spec(VERL.core_name(name))
    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__signature__ = signature  # type: ignore[attr-defined]
    like = f"verl's ``{mirror.verl}``" if mirror else "verl's group estimators"
    estimator.__doc__ = (
        f"verl estimator ``{name}``: {spec.formula} ({spec.reference}).\n\n"
        f"Takes the arguments of {like} (see :data:`MIRRORS`), by position or keyword:\n"
        "    token_level_rewards: ``[B, L]``; the sequence reward is the sum over L.\n"
        "    response_mask: ``[B, L]``; the advantage is broadcast over it.\n"
        "    index: ``[B]`` numpy object array of uid strings (the prompt groups).\n"
        "    config: verl's ``config.algorithm`` (options: ``advbudget.<option>``).\n"
        f"    and by keyword what verl's trainer passes ({', '.join(VERL_PASSES)}); any\n"
        "    other keyword is a TypeError.\n\n"
        "Returns:\n"
        "    ``(advantages, returns)``, ``[B, L]``, in the dtype of token_level_rewards:\n"
        "    the same tensor, except where verl's own estimator returns the reward-to-go\n"
        "    (remax, reinforce_plus_plus).\n"
    )
    return estimator


def _estimate(name: str, mirror: Mirror | None, given: dict[str, Any]) -> tuple[Any, Any]:
    """One call of our verl estimator ``name``, from its bound arguments."""
    extra = given.pop("kwargs", {})
    core = VERL.core_name(name)
    accepted = (*VERL_PASSES, *(i.name for i in get_spec(core).inputs))
    unknown = [key for key in extra if key not in accepted]
    if unknown:
        raise TypeError(
            f"{name} got an unexpected keyword argument {unknown[0]!r} (it takes what "
            f"verl's compute_advantage passes: {', '.join(VERL_PASSES)}; anything else "
            "would be ignored, so it is refused)"
        )
    for key in ("index", "reward_baselines", "non_tensor_batch"):
        if key in given:
            extra[key] = given.pop(key)
    extra.pop("batch", None)  # verl's gdpo reads the response lengths from it; ours the mask
    rewards, mask = given.pop("token_level_rewards"), given.pop("response_mask")
    config = given.pop("config", None)
    arguments = {k: v for k, v in given.items() if not (mirror and k in mirror.unused)}
    result = compute_result(
        name,
        rewards,
        extra.pop("index", None),
        config,
        response_mask=mask,
        arguments=arguments,
        **extra,
    )
    publish(result)  # to the advbudget_* trainer's hooks that run after verl's call
    log_async_metrics(result, read_options(config))  # verl's async trainers: no such hooks
    torch = sys.modules["torch"]
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    if mirror is not None and mirror.tokens:
        advantages, returns = _per_token(mirror.tokens, result, rewards, mask, config, extra)
        return advantages.to(dtype), returns.to(dtype)
    advantages = token_advantages(result.advantages, mask).to(dtype)
    return advantages, advantages


def _per_token(
    kind: str, result: Any, rewards: Any, mask: Any, config: Any, extra: Any
) -> tuple[Any, Any]:
    """verl's per-token estimators in float64: ``reinforce`` (reinforce_plus_plus: the
    reward-to-go at ``algorithm.gamma``, skipping the tokens outside the mask, whitened
    over the batch's tokens with the estimator's options, as the core resolved them) and
    ``remax`` (the reward-to-go minus the greedy rollout's reward). Rows the core leaves
    out (a NaN reward with ``nan_policy="omit"``) get 0 and stay out of the whitening."""
    torch = sys.modules["torch"]
    kept = torch.as_tensor(result.valid, device=rewards.device)[:, None]
    tokens = torch.where(kept, rewards.to(torch.float64), 0.0)
    inside = (mask != 0) & kept
    if kind == "remax":  # verl: no discount, returns unmasked after the reversed sum
        returns = (tokens * inside).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        baselines = _float64(extra["reward_baselines"])
        return returns - torch.where(kept, baselines[:, None], 0.0) * inside, returns
    gamma = option(config, "gamma", 1.0)
    returns = reward_to_go(tokens, inside, gamma=float(gamma))
    return whiten_tokens(returns, inside, **result.options), returns


def register_estimators() -> list[str]:
    """Register every catalogue estimator with verl's ``register_adv_est``; returns the names.

    Idempotent: a second call, or a re-import of this module under another name (as
    pytest's importlib mode does), replaces our own earlier functions. A name taken by
    anything else raises verl's ValueError. Estimators registered with advbudget later in
    this process are registered with verl as they come.
    """
    names = estimator_names()
    for name in names:
        _register_with_verl(name)
    on_register(_on_new_estimator)
    return names


def _register_with_verl(name: str) -> None:
    from verl.trainer.ppo import core_algos

    fn = estimator_function(name)
    registry = estimator_registry()
    existing = registry.get(name)
    if existing is not None and getattr(existing, "__qualname__", None) == fn.__qualname__:
        registry.pop(name)  # ours, from an earlier import or spec
    core_algos.register_adv_est(name)(fn)


def _on_new_estimator(spec: EstimatorSpec) -> None:
    for name in spec.names:
        _FUNCTIONS.pop(VERL.name_of(name), None)  # a replaced estimator: a fresh docstring
        _register_with_verl(VERL.name_of(name))


def report_failure(error: BaseException, what: str = "", consequence: str = "") -> None:
    """Say loudly on stderr that registration failed (verl hides plugin import errors)."""
    consequence = consequence or (
        "verl will later report 'Unknown advantage estimator' for advbudget_* and reward_budget."
        if not what
        else "The advantage estimators are registered; the metrics trainers are not."
    )
    print(
        "\n" + "!" * 78 + "\n"
        f"advbudget: registering {what or 'the verl advantage estimators'} failed: "
        f"{type(error).__name__}: {error}\n{consequence}\n" + "!" * 78,
        file=sys.stderr,
        flush=True,
    )
