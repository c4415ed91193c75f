"""The tunix registry route: every name registered, parity of every mirror of the tunix row
(``own_names``: grpo, drgrpo, rloo) with tunix's own, the agentic learner's one-group
calls, options, errors, the CLI's reward module, the quiet re-registration of ours, and
every learner override recorded in ``_hooks.HOOKS``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from advbudget.adapters import get_convention
from advbudget.testing import rounding_tolerance

from .conftest import TUNIX_WARNINGS

pytestmark = TUNIX_WARNINGS
TUNIX_ROW = get_convention("tunix")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _fresh_options():
    from advbudget.adapters.tunix import configure

    configure()
    yield
    configure()


def _registry():
    from tunix.rl import function_registry

    import advbudget.adapters.tunix  # noqa: F401  (registers)

    return function_registry


def _batch(kind: str, seed: int, groups: int = 16, g: int = 4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "binary":  # ties everywhere, some constant groups
        rewards = rng.integers(0, 2, size=(groups, g)).astype(float)
    elif kind == "graded":
        rewards = rng.choice([0.0, 0.25, 0.5, 1.0], size=(groups, g))
    else:  # continuous float32 values
        rewards = rng.normal(size=(groups, g)).astype(np.float32).astype(float)
    rewards[: groups // 4] = rewards[: groups // 4, :1]  # constant groups
    return rewards.reshape(-1)


def test_every_catalogue_name_is_registered_with_tunix():
    from advbudget.adapters.tunix import estimator_names, registered_names
    from advbudget.core.estimators import all_names

    registry = set(registered_names())
    _registry()
    assert {f"advbudget_{n}" for n in all_names()} | {"reward_budget"} <= registry
    assert set(estimator_names()) <= set(_registry().default_registry.list_functions(
        "advantage_estimator"))  # fmt: skip
    assert {"grpo", "rloo", "drgrpo"} <= registry  # tunix's own stay


def _tunix_names(core: str) -> list[str]:
    return [name for name, of in TUNIX_ROW.names().items() if of == core]


# tunix's grpo divides by the std of one reward (ddof=1): NaN, with numpy's warning; its
# learners never call it so (their configs refuse num_generations=1). Ours gives 0.
NAN_ON_ONE = {"grpo"}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("core", sorted(TUNIX_ROW.own_names))
def test_mirror(core: str, dtype: type):
    """Every mirror of the tunix row against tunix's own registered estimator, through
    tunix's registry: binary (ties), graded and continuous rewards, constant groups,
    groups of 1, 2, 4 and 8, float64 (what the learner passes) and float32."""
    fr = _registry()
    theirs = fr.get_advantage_estimator(TUNIX_ROW.own_names[core])
    for seed, (kind, g) in enumerate(
        (kind, g) for kind in ("binary", "graded", "float32") for g in (1, 2, 4, 8)
    ):
        rewards = _batch(kind, seed, g=g).astype(dtype)
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's ddof warning, g=1
            expected = np.asarray(theirs(rewards=rewards, num_generations=g))
        for name in _tunix_names(core):
            got = fr.get_advantage_estimator(name)(rewards=rewards, num_generations=g)
            assert isinstance(got, np.ndarray)
            assert got.shape == rewards.shape
            if g == 1 and core in NAN_ON_ONE:
                assert np.isnan(expected).all()
                assert np.all(got == 0.0)
                continue
            # both in the rewards' precision: sums of g rewards
            tolerance = rounding_tolerance(expected, terms=g, dtype=dtype)
            np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance, err_msg=name)
            constant = np.ptp(rewards.reshape(-1, g), axis=1) == 0
            assert np.all(got.reshape(-1, g)[constant] == 0.0)
        assert g == 1 or np.abs(expected).max() > 0


@pytest.mark.parametrize("core", sorted(TUNIX_ROW.own_names))
def test_mirror_takes_tunix_shapes_and_signature(core: str):
    """tunix's own estimators take any shape they can ``reshape(-1, G)`` (``[1, B*G]``)
    and return grpo/drgrpo in the rewards' shape, rloo flattened: ours the same, with
    tunix's signature exactly (an unknown keyword is a TypeError, never swallowed)."""
    import inspect

    fr = _registry()
    theirs = fr.get_advantage_estimator(TUNIX_ROW.own_names[core])
    rewards = _batch("graded", 3, g=4).reshape(1, -1)
    expected = np.asarray(theirs(rewards=rewards, num_generations=4))
    for name in _tunix_names(core):
        ours = fr.get_advantage_estimator(name)
        assert inspect.signature(ours).parameters.keys() == {"rewards", "num_generations"}
        got = ours(rewards=rewards, num_generations=4)
        assert got.shape == expected.shape, name
        tolerance = rounding_tolerance(expected, terms=4, dtype=np.float64)
        np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance, err_msg=name)
        with pytest.raises(TypeError, match="unexpected keyword argument 'beta'"):
            ours(rewards=rewards, num_generations=4, beta=0.1)


def test_every_mirror_is_a_tunix_estimator():
    """The row's own names are tunix's registry names (test_mirror calls them)."""
    from advbudget.adapters.tunix import registered_names

    _registry()
    assert set(TUNIX_ROW.own_names.values()) <= set(registered_names())


@pytest.mark.parametrize("estimator", ["grpo", "advbudget_grpo", "reward_budget"])
def test_groups_of_one_are_refused_by_tunix_config(estimator: str):
    """tunix refuses num_generations=1 in its learners' configs (ValueError), whatever the
    estimator: ours are refused by tunix's own check."""
    from tunix.rl.agentic.agentic_grpo_learner import GRPOConfig as AgenticConfig
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    _registry()
    for config in (GRPOConfig, AgenticConfig):
        with pytest.raises(ValueError, match="num_generations must be greater than 1"):
            config(num_generations=1, advantage_estimator=estimator)


def test_reward_budget_hand_computed():
    fr = _registry()
    got = fr.get_advantage_estimator("reward_budget")(
        rewards=np.array([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]), num_generations=4
    )
    # group 2: B·(r−min)/Σ(r−min) − B/G = 1/3 − 1/4 for the three 1s, −1/4 for the 0
    np.testing.assert_allclose(got, [0, 0, 0, 0, -0.25, 1 / 12, 1 / 12, 1 / 12], atol=1e-6)


def test_agentic_learner_one_group_at_a_time():
    """The agentic learner calls the estimator with one group's [G] rewards: each call
    equals that group's slice of the whole-batch call, for every estimator without batch
    statistics; those with some warn."""
    from tunix.rl.agentic.agentic_grpo_learner import GRPOConfig as AgenticConfig

    from advbudget.adapters import get_convention
    from advbudget.adapters.tunix import estimator_names
    from advbudget.core import get_spec

    fr = _registry()
    AgenticConfig(num_generations=4, advantage_estimator="reward_budget")  # accepted
    rewards, binary = _batch("graded", 3), _batch("binary", 3)
    tunix = get_convention("tunix")
    for name in estimator_names():
        spec = get_spec(tunix.core_name(name))
        fn = fr.get_advantage_estimator(name)
        if spec.tracker is not None:  # remembers prompts: the agentic learner gives none
            with pytest.raises(ValueError, match=r"prompt_ids: estimator .* lends it"):
                fn(rewards=rewards[:4], num_generations=4)
            continue
        if any(i.required for i in spec.inputs) or spec.batch_statistics:
            continue
        # passk refuses a group of three reward values or more: binary rewards for it
        batch = binary if spec.name == "passk" else rewards
        whole = fn(rewards=batch, num_generations=4)
        per_group = [fn(rewards=group, num_generations=4) for group in batch.reshape(-1, 4)]
        np.testing.assert_allclose(np.concatenate(per_group), whole, atol=1e-6, err_msg=name)
    with pytest.warns(UserWarning, match="called on one group of 4 rollouts"):
        fr.get_advantage_estimator("advbudget_reinforce_plus_plus_baseline")(
            rewards=rewards[:4], num_generations=4
        )


def test_options_reach_the_estimator():
    from advbudget.adapters.tunix import configure

    fr = _registry()
    rewards = np.array([1.0, 0.0, 0.0, 0.0])
    configure(budget=2.0)
    np.testing.assert_allclose(
        fr.get_advantage_estimator("reward_budget")(rewards=rewards, num_generations=4),
        [1.5, -0.5, -0.5, -0.5],
    )
    configure(eps=1.0, std_correction=0)  # grpo: (r - .25) / (sqrt(3/16) + 1)
    got = fr.get_advantage_estimator("advbudget_grpo")(rewards=rewards, num_generations=4)
    np.testing.assert_allclose(got[0], 0.75 / (np.sqrt(3 / 16) + 1), rtol=1e-6)
    configure(nan_policy="omit")
    got = fr.get_advantage_estimator("reward_budget")(
        rewards=np.array([1.0, np.nan, 0.0, 0.0]), num_generations=4
    )
    np.testing.assert_allclose(got, [2 / 3, 0.0, -1 / 3, -1 / 3], atol=1e-6)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"budjet": 1.0}, "budjet: not an advbudget option in tunix"),
        ({"budget": -1.0}, "budget"),
        ({"nan_policy": "ignore"}, "nan_policy"),
        ({"solved_reward": "high"}, "solved_reward: expected a finite number or None"),
    ],
)
def test_bad_options_fail_at_once_in_one_line(options, message):
    from advbudget.adapters.tunix import configure

    with pytest.raises(ValueError, match=message) as raised:
        configure(**options)
    assert "\n" not in str(raised.value)


def test_bad_calls_fail_in_one_line():
    fr = _registry()
    fn = fr.get_advantage_estimator("reward_budget")
    with pytest.raises(ValueError, match="num_generations: reward_budget expected a divisor"):
        fn(rewards=np.zeros(6), num_generations=4)
    for empty in (np.zeros((1, 0)), np.float64(1.0)):
        with pytest.raises(ValueError, match=r"rewards: reward_budget expected a non-empty"):
            fn(rewards=empty, num_generations=4)
    with pytest.raises(ValueError, match="NaN"):
        fn(rewards=np.array([1.0, np.nan, 0.0, 0.0]), num_generations=4)
    with pytest.raises(ValueError, match="advbudget_opo needs response_lengths"):
        fr.get_advantage_estimator("advbudget_opo")(rewards=np.zeros(4), num_generations=4)
    with pytest.raises(LookupError, match="advbudget_nope"):
        fr.get_advantage_estimator("advbudget_nope")


def test_drgrpo_config_takes_our_estimator_and_refuses_unknown_names():
    from tunix.rl.grpo.drgrpo_learner import DrGRPOConfig

    from advbudget.adapters.tunix import drgrpo_config

    config = drgrpo_config(advantage_estimator="reward_budget", num_generations=4)
    assert isinstance(config, DrGRPOConfig)
    assert config.advantage_estimator == "reward_budget"
    assert config.loss_agg_mode == "sequence-mean-token-scale"  # Dr.GRPO's, kept
    with pytest.raises(ValueError, match="advantage_estimator: expected a tunix-registered"):
        drgrpo_config(advantage_estimator="advbudget_nope", num_generations=4)


def test_resample_is_refused_in_one_line():
    from advbudget.adapters._options import parse_skipped_groups
    from advbudget.adapters.tunix._options import RESAMPLE_REFUSED

    with pytest.raises(ValueError, match="no dynamic sampling") as raised:
        parse_skipped_groups("resample", "skipped_groups", resample_refused=RESAMPLE_REFUSED)
    assert "\n" not in str(raised.value)


def test_metric_fn_gives_the_adapters_keys():
    from advbudget.adapters.tunix import metric_fn

    fr = _registry()
    rewards = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    advantages = fr.get_advantage_estimator("reward_budget")(rewards=rewards, num_generations=2)
    metrics = metric_fn(prompts=[], completions=[], rewards=rewards, advantages=advantages)
    assert metrics["advbudget/skipped_group_fraction"][0] == 0.75
    assert metrics["advbudget/solved_group_fraction"][0] == 0.25
    assert metrics["advbudget/unsolved_group_fraction"][0] == 0.5
    assert metrics["advbudget/skipped_group_fraction"][1] is np.mean
    other = fr.get_advantage_estimator("grpo")(rewards=rewards, num_generations=2)
    assert metric_fn(prompts=[], completions=[], rewards=rewards.copy(), advantages=other) == {}


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=300,
    )


# The path the docs give (an alias) and where the module lives.
@pytest.mark.parametrize("module", ["advbudget.rewards.tunix", "advbudget.adapters.tunix.rewards"])
def test_the_cli_reward_module_registers_the_estimators(module: str):
    """tunix's CLI imports reward_functions entries with HyperParameters.obtain_reward_fn
    before it builds GrpoConfig: that import alone must register our names."""
    out = _python(
        """
        import sys, types
        from tunix.rl import function_registry as fr
        from tunix.cli.config import HyperParameters
        names = fr.default_registry.list_functions("advantage_estimator")
        assert "reward_budget" not in names, names
        fake = types.SimpleNamespace(config={
            "reward_functions": [sys.argv[1]], "verl_compatible": False})
        fns = HyperParameters.obtain_reward_fn(fake)
        print([f.__name__ for f in fns])
        print(fns[0](["q"], ["Answer: 4"], answer=["4"]))
        print(fr.get_advantage_estimator("reward_budget")(
            rewards=__import__("numpy").array([1.0, 0.0]), num_generations=2))
        """,
        module,
        ADVBUDGET_TUNIX_OPTIONS="budget=2.0",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-3] == "['dapo_accuracy']"
    assert lines[-2] == "[1.0]"
    assert lines[-1] == "[ 1. -1.]"  # budget=2.0 from the environment


def test_a_bad_environment_option_fails_the_import_in_one_line():
    out = _python("import advbudget.adapters.tunix", ADVBUDGET_TUNIX_OPTIONS="budget=-1")
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("ValueError: budget")


def test_an_unsupported_tunix_version_is_named():
    from advbudget.adapters.tunix import check_tunix_version

    with pytest.raises(ImportError, match=r"supports google-tunix>=0.1.7,<0.1.8, got 0.2.0"):
        check_tunix_version("0.2.0")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kappa_every": -1}, "kappa_every: expected an int >= 0, got -1"),
        ({"kappa_every": 2.0}, "kappa_every: expected an int >= 0, got 2.0"),
        ({"prompt_ledger": "yes"}, "prompt_ledger: expected a bool, got 'yes'"),
    ],
)
def test_bad_learner_options_fail_before_tunix_in_one_line(options, message):
    from advbudget.adapters.tunix import AdvBudgetGRPOLearner

    with pytest.raises((ValueError, TypeError), match=message) as raised:
        AdvBudgetGRPOLearner(rl_cluster=None, algo_config=None, reward_fns=[], **options)
    assert "\n" not in str(raised.value)


def test_kappa_leaves_out_a_batch_scored_with_other_weights():
    """The guard behind κ_eff's timing: a batch whose "before" was taken at another
    optimizer step than the one its mini-batch step began from is left out, with a
    warning, rather than logged."""
    from types import SimpleNamespace

    from advbudget.adapters.tunix._kappa import KappaBatch, KappaTracker
    from advbudget.metrics import kappa_pairs

    cluster = SimpleNamespace(actor_trainer=SimpleNamespace(train_steps=3))
    tracker = KappaTracker(cluster, temperature=1.0)
    pairs = kappa_pairs(np.array([0.5, -0.5]), group_size=2)
    stale = KappaBatch(pairs, 2, None, None, np.ones((2, 1)), np.zeros(2), train_steps=1)
    tracker.add(stale)
    tracker.measure_after(start_steps=2)  # the step began at 2: 'before' was taken at 1
    with pytest.warns(RuntimeWarning, match=r"κ_eff at step 7 leaves out 1 batch.*step 1, "):
        assert tracker.flush(7) == {}
    tracker.measure_after(start_steps=3)  # nothing pending, no update: nothing to log
    assert tracker.flush(8) == {"advbudget/kappa_eff/count": (0.0, np.sum)}


def test_an_estimator_of_reward_components_is_refused():
    # tunix hands an estimator one reward per rollout: gdpo has nothing to normalise.
    fn = _registry().get_advantage_estimator("advbudget_gdpo")
    with pytest.raises(ValueError, match=r"^estimator: advbudget_gdpo takes reward components"):
        fn(rewards=np.array([1.0, 0.0, 0.0, 1.0]), num_generations=2)


def test_only_our_names_registered_again_are_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """The package's filter of tunix's warning (installed at import) matches tunix's words:
    ours registered again log nothing, another name still warns."""
    from tunix.rl.function_registry import FunctionRegistry

    _registry()  # installs the filter
    registry = FunctionRegistry()
    with caplog.at_level(logging.WARNING):
        for name in ("advbudget_budget", "reward_budget", "advbudget_budget", "reward_budget"):
            registry.register("advantage_estimator", name)(print)
        assert caplog.messages == []
        for _ in range(2):
            registry.register("advantage_estimator", "grpo")(print)
    assert [m for m in caplog.messages if "already registered" in m] == [
        "Function 'grpo' is already registered in category 'advantage_estimator'. "
        "Overwriting with new function."
    ]


#: What ``abc.ABCMeta`` sets on every class it makes (tunix's learners are ABCs).
ABC_CACHE = "_abc_impl"


def test_every_override_is_a_recorded_hook() -> None:
    """A method of ours that shadows one of tunix's learners' (on purpose or by a clash of
    names) is an override, recorded and kept in ``_hooks.LearnerHooks`` (the agentic
    learner's in ``_hooks.AgenticLearnerHooks``)."""
    from tunix.rl.agentic.agentic_grpo_learner import GRPOLearner as AgenticGRPOLearner
    from tunix.rl.grpo.dapo_learner import DAPOLearner
    from tunix.rl.grpo.grpo_learner import GRPOLearner

    from advbudget.adapters.tunix import (
        AdvBudgetAgenticGRPOLearner,
        AdvBudgetDAPOLearner,
        AdvBudgetGRPOLearner,
    )
    from advbudget.adapters.tunix._hooks import HOOKS

    overrides = set()
    for learner, tunix in (
        (AdvBudgetGRPOLearner, GRPOLearner),
        (AdvBudgetDAPOLearner, DAPOLearner),
        (AdvBudgetAgenticGRPOLearner, AgenticGRPOLearner),
    ):
        mro = learner.__mro__
        overrides |= {
            f"{cls.__module__}.{cls.__qualname__}.{name}"
            for cls in mro[: mro.index(tunix)]
            for name in vars(cls)
            if hasattr(tunix, name) and not name.startswith("__") and name != ABC_CACHE
        }
    agentic = "tunix.rl.agentic."
    recorded = {
        f"advbudget.adapters.tunix._hooks."
        f"{'Agentic' if hook.module.startswith(agentic) else ''}LearnerHooks."
        f"{hook.qualname.rsplit('.', 1)[-1]}"
        for hook in HOOKS
        if hook.use == "override"
    }
    assert overrides == recorded
