"""The estimator catalogue: specs, options, inputs, plugins, conventions, the docs page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import advbudget
from advbudget import (
    EstimatorSpec,
    Input,
    Option,
    Rule,
    compute_advantages,
    estimator_names,
    estimator_spec,
    get_spec,
    register_estimator,
    unregister_estimator,
)
from advbudget.adapters import CONVENTIONS, get_convention
from advbudget.checks import positive_finite
from advbudget.lab.cli._estimators_page import estimators_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_docs_page_is_generated_from_the_catalogue():
    page = (ROOT / "docs" / "estimators.md").read_text(encoding="utf-8")
    assert page == estimators_markdown(), (
        "docs/estimators.md is stale: run `advbudget estimators --markdown > docs/estimators.md`"
    )
    for name in estimator_names():
        assert f"## `{name}`" in page


def test_spec_options_are_checked_with_defaults():
    spec = get_spec("budget")
    assert spec.resolve_options({}) == {"budget": 1.0}
    assert spec.resolve_options({"budget": 2}) == {"budget": 2.0}
    with pytest.raises(ValueError, match="budget: expected a positive finite number, got 0"):
        spec.resolve_options({"budget": 0})
    with pytest.raises(TypeError, match="eps: not an option of estimator 'budget'"):
        spec.resolve_options({"eps": 1e-6})


def _scaled_dr(grouped, *, scale=1.0, lengths):
    centred = grouped.gap - grouped.expand(grouped.sum(grouped.gap) / grouped.count)
    keep = grouped.xp.astype(grouped.kept(), grouped.gap.dtype)
    return scale * centred * lengths * grouped.expand(keep)


SCALED = EstimatorSpec(
    name="scaled_dr",
    fn=_scaled_dr,
    formula="scale · len · (r − mean)",
    reference="a test",
    aliases=("sdr",),
    options=(Option("scale", 1.0, positive_finite),),
    inputs=(Input("lengths", "a length per rollout"),),
)


def test_a_spec_with_inputs_and_aliases():
    register_estimator(SCALED)
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    lengths = np.array([2.0, 4.0, 1.0, 1.0])
    res = compute_advantages(rewards, "sdr", group_size=2, lengths=lengths, scale=0.5)
    np.testing.assert_allclose(res.advantages, [0.5, -1.0, 0.0, 0.0])
    assert res.estimator == "scaled_dr"
    assert get_spec("scaled_dr").required_inputs == ("lengths",)
    assert get_spec("reinforce").required_inputs == ()  # response_lengths: optional there
    with pytest.raises(ValueError, match=r"lengths: the scaled_dr estimator needs a length"):
        compute_advantages(rewards, "scaled_dr", group_size=2)
    with pytest.raises(ValueError, match=r"lengths: expected one value per rollout, shape \(4,\)"):
        compute_advantages(rewards, "scaled_dr", group_size=2, lengths=lengths[:3])
    with pytest.raises(ValueError, match="lengths: expected finite numbers"):
        compute_advantages(rewards, "scaled_dr", group_size=2, lengths=[1.0, np.nan, 1.0, 1.0])
    torch = pytest.importorskip("torch")
    with pytest.raises(
        TypeError, match="lengths: expected a numpy array like rewards, got a torch"
    ):
        compute_advantages(rewards, "scaled_dr", group_size=2, lengths=torch.ones(4))
    # Every adapter sees it by its framework's name.
    assert get_convention("verl").core_name("advbudget_sdr") == "scaled_dr"
    assert get_convention("openrlhf").core_name("advbudget_scaled_dr") == "scaled_dr"
    assert get_convention("trl").core_name("sdr") == "scaled_dr"
    assert "scale" in get_convention("openrlhf").option_names()


def test_registry_state_is_restored_between_tests():
    assert "scaled_dr" not in estimator_names()  # registered by the test above


def test_replacing_an_alias_takes_it_from_its_estimator():
    def doubled(grouped):
        return 2 * grouped.gap

    with pytest.raises(ValueError, match="an alias of 'dr'"):
        register_estimator("dr_grpo", doubled)
    register_estimator("dr_grpo", doubled, replace=True)
    rewards = np.array([1.0, 0.0])
    np.testing.assert_allclose(
        compute_advantages(rewards, "dr_grpo", group_size=2).advantages, [2.0, 0.0]
    )
    np.testing.assert_allclose(
        compute_advantages(rewards, "dr", group_size=2).advantages, [0.5, -0.5]
    )
    assert get_spec("dr").aliases == ()
    unregister_estimator("dr_grpo")
    with pytest.raises(ValueError, match="expected one of"):
        get_spec("dr_grpo")


def test_function_keyword_defaults_become_options():
    @register_estimator("times")
    def times(grouped, *, factor=3.0):
        """factor · gap"""
        return factor * grouped.gap

    spec = get_spec("times")
    assert [(o.name, o.default) for o in spec.options] == [("factor", 3.0)]
    assert spec.formula == "factor · gap"
    out = compute_advantages(np.array([1.0, 0.0]), "times", group_size=2, factor=2.0)
    np.testing.assert_allclose(out.advantages, [2.0, 0.0])


def test_listeners_hear_new_estimators():
    from advbudget.core import estimators

    heard = []
    estimators.on_register(heard.append)
    register_estimator("noop", lambda grouped: grouped.gap * 0)
    assert [spec.name for spec in heard] == ["noop"]


@pytest.mark.parametrize("framework", sorted(CONVENTIONS))
def test_every_estimator_has_a_name_in_every_framework(framework):
    convention = get_convention(framework)
    names = convention.names()
    for spec in advbudget.core.estimator_specs():
        for name in spec.names:
            assert names[convention.name_of(name)] == spec.name
    with pytest.raises(ValueError, match=f"in {framework}, got 'nope'"):
        convention.core_name("nope")


def test_mirrors_keep_the_framework_constants_others_the_core_defaults():
    verl = get_convention("verl")
    assert verl.settings("grpo") == {
        "tie_rtol": 0.0,
        "tie_atol": 0.0,
        "singletons": "raw",
        "eps": 1e-6,
        "std_correction": 1,
    }
    assert verl.settings("budget")["singletons"] == "skip"
    assert get_convention("trl").settings("group_norm")["eps"] == 1e-4
    assert get_convention("trl").settings("grpo", {"eps": 0.1})["eps"] == 0.1
    # verl's grpo_passk raises on a group of one: its mirror too; a user may choose
    assert verl.settings("grpo_passk")["singletons"] == "refuse"
    assert verl.settings("grpo_passk", {"singletons": "skip"})["singletons"] == "skip"
    assert verl.returns_of("remax") == "reward"  # verl's remax returns the reward-to-go
    assert verl.returns_of("grpo") == verl.returns_of("budget") == "advantages"
    openrlhf = get_convention("openrlhf")
    assert openrlhf.returns_of("reinforce_baseline") == "dr"  # returns before whitening


@pytest.mark.parametrize("framework", sorted(CONVENTIONS))
def test_the_rows_name_mirrors_only(framework):
    """singletons_refused and returns speak of mirrors; returns name "reward" or a
    catalogue estimator."""
    convention = get_convention(framework)
    assert convention.singletons_refused <= set(convention.own_names)
    assert set(convention.returns) <= set(convention.own_names)
    for source in convention.returns.values():
        assert source == "reward" or get_spec(source).name == source


def test_cli_lists_the_catalogue():
    out = subprocess.run(
        [sys.executable, "-m", "advbudget.lab.cli", "estimators", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == estimators_markdown()


def _plugin_path(tmp_path: Path, module_source: str, entry: str) -> Path:
    """A package plus a dist-info declaring an advbudget.estimators entry point."""
    (tmp_path / "my_plugin.py").write_text(module_source)
    dist = tmp_path / "my_plugin-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(f"[advbudget.estimators]\n{entry}\n")
    return tmp_path


def _run(code: str, path: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_entry_point_plugins_are_found_by_name(tmp_path):
    source = (
        "def halved(grouped, *, budget=1.0):\n"
        "    from advbudget import get_estimator\n"
        "    return get_estimator('budget')(grouped, budget=budget / 2)\n"
    )
    path = _plugin_path(tmp_path, source, "halved = my_plugin:halved")
    out = _run(
        "import numpy as np; from advbudget import compute_advantages as c;"
        "print(c(np.array([1.0, 0.0]), 'halved', group_size=2).advantages.tolist())",
        path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.25, -0.25]"


def test_a_broken_plugin_is_reported_by_name_and_costs_no_other(tmp_path):
    path = _plugin_path(tmp_path, "raise RuntimeError('boom')\n", "broken = my_plugin:nothing")
    out = _run(
        "import numpy as np; from advbudget import compute_advantages as c;"
        "print(c(np.array([1.0, 0.0]), 'budget', group_size=2).advantages.tolist());"
        "c(np.array([1.0, 0.0]), 'broken', group_size=2)",
        path,
    )
    assert out.stdout.strip() == "[0.5, -0.5]"
    assert "estimator: 'broken' is not available" in out.stderr
    assert "RuntimeError: boom" in out.stderr


def test_explain_takes_aliases_and_refuses_estimators_needing_inputs():
    from typer.testing import CliRunner

    from advbudget.lab.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["explain", "--estimators", "dr_grpo,reward_budget", "-G", "4"])
    assert ok.exit_code == 0, ok.output
    assert "dr_grpo" in ok.output
    refused = runner.invoke(app, ["explain", "--estimators", "opo", "-G", "4"])
    assert refused.exit_code == 2
    assert "Traceback" not in refused.output
    assert "opo needs per-rollout inputs" in " ".join(refused.output.split())
    components = runner.invoke(app, ["explain", "--estimators", "gdpo", "-G", "4"])
    assert components.exit_code == 2
    assert "gdpo takes several rewards per rollout" in " ".join(components.output.split())
    for name in ("spo", "rae"):  # their advantage for k of G depends on the prompt's history
        remembering = runner.invoke(app, ["explain", "--estimators", name, "-G", "4"])
        assert remembering.exit_code == 2
        assert f"{name} remembers each prompt across steps" in " ".join(remembering.output.split())


def test_version_and_a_huge_group_size_are_one_line_answers():
    from typer.testing import CliRunner

    import advbudget
    from advbudget.lab.cli import app

    runner = CliRunner()
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0
    assert version.output.strip() == f"advbudget {advbudget.__version__}"
    huge = runner.invoke(app, ["explain", "--group-size", "100000"])
    assert huge.exit_code == 2
    assert "1024" in huge.output
    assert "Traceback" not in huge.output


def test_a_plugin_refuses_raw_singletons_unless_it_declares_them():
    # Without the declaration a group of one would silently get 0 and valid=True.
    def centred(grouped, *, scale=1.0):
        return scale * grouped.deviation() * grouped.kept_rows()

    register_estimator("plain_centred", centred)
    rewards = np.array([3.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"singletons: expected 'skip' for the plain_centred"):
        compute_advantages(rewards, "plain_centred", group_ids=[0, 1, 1], singletons="raw")

    def centred_raw(grouped, *, scale=1.0):
        return grouped.with_raw_singletons(scale * grouped.deviation() * grouped.kept_rows())

    register_estimator(estimator_spec(centred_raw, raw_singletons=True))
    result = compute_advantages(rewards, "centred_raw", group_ids=[0, 1, 1], singletons="raw")
    np.testing.assert_allclose(result.advantages, [3.0, 0.5, -0.5])
    assert result.valid.tolist() == [True, True, True]


def test_options_come_from_the_signature_once():
    spec = get_spec("reinforce_baseline")
    assert {o.name: o.default for o in spec.options} == {
        "std_correction": 0,
        "var_eps": 0.0,
        "var_floor": 1e-8,
        "std_norm": True,
    }
    verl = get_spec("reinforce_plus_plus_baseline")
    assert verl.option("std_correction").default == 1
    assert verl.option("var_eps").default == 1e-8
    with pytest.raises(TypeError, match=r"rules: 'scale' is not a keyword parameter"):
        estimator_spec(lambda grouped: grouped.deviation(), rules={"scale": Rule()})


def test_specs_declare_skip_rules_batch_statistics_and_slopes():
    for name in ("reinforce_plus_plus_baseline", "reinforce_baseline", "reinforce", "remax"):
        assert get_spec(name).skips == "never"
    for name in ("opo", "grpo_passk", "gpg", "grpo_batch_std", "rloo_normalized"):
        assert get_spec(name).skips == "ties"
    for name in ("gpg", "grpo_batch_std", "rloo_normalized", "reinforce_plus_plus_baseline",
                 "reinforce_baseline", "reinforce"):  # fmt: skip
        assert get_spec(name).batch_statistics
    assert get_spec("reinforce_plus_plus_baseline").slope_of == "dr"
    assert get_spec("rloo_normalized").slope_of == "rloo"
    assert [i.required for i in get_spec("reinforce").inputs] == [False]
    # Mirrors: verl's constants for its estimators, OpenRLHF's and TRL's for theirs.
    verl = get_convention("verl")
    assert verl.settings("reinforce_plus_plus_baseline")["singletons"] == "raw"
    assert verl.settings("grpo_passk")["singletons"] == "refuse"  # as verl's, on a group of one
    assert verl.settings("opo")["tie_atol"] == 0.0
    assert get_convention("openrlhf").settings("reinforce_baseline")["var_floor"] == 1e-8
    assert get_convention("trl").settings("grpo_batch_std")["eps"] == 1e-4
    assert get_convention("trl").settings("rloo_normalized")["eps"] == 1e-4
