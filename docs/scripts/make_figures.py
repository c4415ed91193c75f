"""Draw the figures of docs/method.md from advbudget.theory (binary rewards, exact).

    python docs/scripts/make_figures.py                  # writes docs/figures/*.png
    python docs/scripts/make_figures.py --output-dir /tmp/figures

Figures:

- ``advantages.png``: the advantage of a correct and of a wrong rollout against the
  number k of correct rollouts in a group of G = 8, for every estimator;
- ``slopes.png``: the expected update slope dJ/dp each estimator implies, against the
  prompt's success probability p (``advbudget.theory.implied_slope``), with f'_{G-1}(p);
- ``objective.png``: budgeting's exact finite-G objective f_{G-1}(p) against its
  large-G log-mean reading log p + H_{G-1}, at G = 8 and G = 64.

Needs matplotlib (``pip install "advbudget[plot]"``). The PNGs carry no timestamp or
version metadata, so rerunning with the same matplotlib gives the same files.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from advbudget import theory

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
    plt.close("all")
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()
