"""Draw the figures of docs/method.md (from advbudget.theory, binary rewards, exact) and of
docs/simulation.md (from the lab's stored results in docs/data/sim/).

    python docs/scripts/make_figures.py                  # writes docs/figures/*.png
    python docs/scripts/make_figures.py --output-dir /tmp/figures

Figures:

- ``advantages.png``: the advantage of a correct and of a wrong rollout against the
  number k of correct rollouts in a group of G = 8, for every estimator;
- ``slopes.png``: the expected update slope dJ/dp each estimator implies, against the
  prompt's success probability p (``advbudget.theory.implied_slope``), with f'_{G-1}(p);
- ``objective.png``: budgeting's exact finite-G objective f_{G-1}(p) against its
  large-G log-mean reading log p + H_{G-1}, at G = 8 and G = 64;
- ``sim-compare.png``: held-out accuracy and hard types discovered against the training
  step, both regimes of the lab, with the policy-class ceiling and the oracle
  (``docs/data/sim/compare-*.json``);
- ``sim-map.png``: the map of budget − GRPO and budget − Dr (``docs/data/sim/map.json``).

Needs matplotlib (``pip install -e ".[plot]"``). The PNGs carry no timestamp or
version metadata, so rerunning with the same matplotlib gives the same files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from advbudget import theory
from advbudget.lab.sim._plot import plot_map

SIM_DATA = Path(__file__).resolve().parents[1] / "data" / "sim"

ESTIMATORS = {  # name -> (label, colour, line style)
    "budget": ("budget (reward budgeting)", "#1f77b4", "-"),
    "grpo": ("GRPO (group-normalised)", "#d62728", "-"),
    "dr": ("Dr. GRPO", "#2ca02c", "--"),
    "rloo": ("RLOO", "#9467bd", ":"),
}
GROUP_SIZE = 8
DPI = 110
DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "figures"


def plot_advantages(plt: Any, output: Path, group_size: int = GROUP_SIZE) -> Path:
    """Advantage of a correct and of a wrong rollout against k (1..G-1 correct)."""
    fig, (right, wrong) = plt.subplots(1, 2, figsize=(9.0, 3.6), sharex=True)
    k = np.arange(1, group_size)
    for name, (label, colour, style) in ESTIMATORS.items():
        correct, incorrect = theory.binary_advantages(name, group_size)
        right.plot(k, correct[1:group_size], style, color=colour, marker="o", ms=4, label=label)
        wrong.plot(k, incorrect[1:group_size], style, color=colour, marker="o", ms=4)
    right.set_title("correct rollout")
    wrong.set_title("wrong rollout")
    for axes in (right, wrong):
        axes.axhline(0.0, color="0.6", lw=0.8)
        axes.set_xlabel(f"k correct of G = {group_size}")
        axes.set_xticks(k)
        axes.grid(alpha=0.3)
    right.set_ylabel("advantage")
    right.legend(fontsize=8, frameon=False)
    fig.suptitle("Advantages with binary rewards (budget B = 1, GRPO unbiased std)", fontsize=11)
    fig.tight_layout()
    return _save(fig, output / "advantages.png")


def plot_slopes(plt: Any, output: Path, group_size: int = GROUP_SIZE) -> Path:
    """The implied objective slope dJ/dp of each estimator against p."""
    fig, axes = plt.subplots(figsize=(6.4, 4.0))
    p = np.linspace(0.0, 1.0, 201)
    for name, (label, colour, style) in ESTIMATORS.items():
        axes.plot(p, theory.implied_slope(name, group_size, p), style, color=colour, label=label)
    exact = theory.objective_slope(p[::20], group_size)
    axes.plot(p[::20], exact, "o", color="black", ms=4, mfc="none", label=r"$f'_{G-1}(p)$")
    axes.set_xlabel("p, the prompt's success probability")
    axes.set_ylabel("expected update slope dJ/dp")
    axes.set_title(f"Objective slope each estimator implies, G = {group_size}", fontsize=11)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, None)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, frameon=False, loc="center", bbox_to_anchor=(0.5, 0.53), ncols=2)
    fig.tight_layout()
    return _save(fig, output / "slopes.png")


def plot_objective(plt: Any, output: Path) -> Path:
    """f_{G-1}(p) against log p + H_{G-1}: the log-mean reading holds only for large G."""
    fig, axes = plt.subplots(figsize=(6.4, 4.0))
    p = np.linspace(0.005, 1.0, 400)
    for group_size, colour in ((8, "#1f77b4"), (64, "#ff7f0e")):
        axes.plot(
            p,
            theory.objective(p, group_size),
            color=colour,
            label=f"$f_{{G-1}}(p)$, G = {group_size}",
        )
        axes.plot(
            p,
            theory.log_mean_objective(p, group_size),
            "--",
            color=colour,
            label=f"log p + $H_{{G-1}}$, G = {group_size}",
        )
    axes.set_xlabel("p, the prompt's success probability")
    axes.set_ylabel("objective per prompt")
    axes.set_title("Budgeting's exact objective and its large-G limit", fontsize=11)
    axes.set_xlim(0, 1)
    axes.set_ylim(-1.5, 5.0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, frameon=False, loc="lower right")
    fig.tight_layout()
    return _save(fig, output / "objective.png")


def plot_sim_compare(plt: Any, output: Path, data_dir: Path = SIM_DATA) -> Path:
    """Accuracy and hard types found against the step, transient and persistent regime."""
    fig, axes = plt.subplots(2, 2, figsize=(11.0, 7.0))
    for column, regime in enumerate(("transient", "persistent")):
        data = json.loads((data_dir / f"compare-{regime}.json").read_text(encoding="utf-8"))
        steps = np.array(data["curve_steps"])
        task = data["config"]["task"]
        accuracy, found = axes[0, column], axes[1, column]
        for arm in data["arms"]:
            name = arm["run"]["estimator"]
            label, colour, style = ESTIMATORS.get(name, (name, None, "-"))
            for axis, key, scale in (
                (accuracy, "accuracy", 100.0),
                (found, "hard_types_discovered", 1.0),
            ):
                curves = scale * np.array(arm["curves"][key], dtype=float)
                mean, std = curves.mean(axis=0), curves.std(axis=0, ddof=1)
                (line,) = axis.plot(steps, mean, style, color=colour, label=label, lw=1.4)
                axis.fill_between(
                    steps, mean - std, mean + std, color=line.get_color(), alpha=0.15, lw=0
                )
        ceiling, oracle = 100 * data["ceiling"]["accuracy"], 100 * data["oracle_accuracy"]
        accuracy.axhline(
            ceiling, color="black", ls="--", lw=0.9, label=f"policy-class ceiling {ceiling:.1f}"
        )
        accuracy.axhline(oracle, color="black", ls=":", lw=0.9, label=f"oracle {oracle:.1f}")
        found.axhline(task["hard_types"], color="black", ls=":", lw=0.9)
        accuracy.set_title(
            f"{regime} regime: {task['routine_types']} routine + {task['hard_types']} hard types",
            fontsize=10,
        )
        accuracy.set_ylabel("held-out accuracy (points, % solved)")
        found.set_ylabel("hard types discovered (specialist prob. > 0.5)")
        for axis in (accuracy, found):
            axis.set_xlabel("training step")
            axis.grid(alpha=0.3)
        accuracy.legend(fontsize=7, frameon=False, loc="lower right")
    seeds = len(data["config"]["seeds"])
    fig.suptitle(f"The lab's two regimes: mean over {seeds} seeds, band ±1 std", fontsize=11)
    fig.tight_layout()
    return _save(fig, output / "sim-compare.png")


def plot_sim_map(output: Path, data_dir: Path = SIM_DATA) -> Path:
    """The map of where budgeting helps, drawn by the lab's own plot_map."""
    data = json.loads((data_dir / "map.json").read_text(encoding="utf-8"))
    return plot_map(data, output / "sim-map.png", metadata={"Software": None})


def _save(fig: Any, path: Path) -> Path:
    # No "Software" (matplotlib version) or date chunk: the files depend on the data only.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    return path


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"where to write the PNGs (default: {DEFAULT_OUTPUT})",
    )
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output: Path = args.output_dir
    output.mkdir(parents=True, exist_ok=True)
    written = [plot_advantages(plt, output), plot_slopes(plt, output), plot_objective(plt, output)]
    written += [plot_sim_compare(plt, output), plot_sim_map(output)]
    plt.close("all")
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()
