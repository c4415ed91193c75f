"""Tables and one-line readings of the lab's results, computed from their JSON data.

The terminal (``advbudget simulate``) and docs/simulation.md show the same rows and the
same reading, both made here from what :func:`advbudget.lab.sim.to_json` or
:func:`advbudget.lab.sim.run_map` return, so a number in the docs can be checked against
the stored JSON it came from. Accuracies are in points (percent of held-out prompts
solved, exact expectation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

DOCS_POINTER = "What this shows and what it does not: docs/simulation.md"
LEGEND = (
    "n×T: seeds × steps; mean ±std over seeds; acc: points (% of held-out prompts "
    "solved, exact); gap@t: ceiling − accuracy at step t; found: hard types whose "
    "specialist has prob. > 0.5; escape: first step with hard-type acc ≥ half the "
    "held-out bound's (seeds that got there)."
)
REFERENCE = "budget"
# A paired difference counts as a difference when it exceeds this many standard errors.
SIGNIFICANCE = 2.0


def _points(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.{digits}f}"


def _pm(se: float) -> str:
    """``±SE`` in points, with a second digit when the first would read ±0.0."""
    points = 100 * se
    return f"±{points:.2f}" if points < 0.05 else f"±{points:.1f}"


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _mean_std(values: list[Any], scale: float, digits: int) -> str:
    finite = _finite(values)
    if not finite:
        return "n/a"
    mean = scale * float(np.mean(finite))
    std = scale * float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0
    return f"{mean:.{digits}f} ±{std:.{digits}f}"


def paired(first: list[Any], second: list[Any]) -> tuple[float, float, int, int]:
    """Mean and standard error of ``first - second`` over the seeds both have, the count
    of seeds where ``first`` is higher, and the number of pairs.

    Examples:
        >>> from advbudget.lab.sim._report import paired
        >>> paired([0.5, 0.7], [0.4, 0.4])
        (0.2, 0.1, 2, 2)
    """
    pairs = [
        (float(a), float(b))
        for a, b in zip(first, second, strict=True)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
    ]
    if not pairs:
        return math.nan, math.nan, 0, 0
    delta = np.array([a - b for a, b in pairs])
    se = float(delta.std(ddof=1) / math.sqrt(delta.size)) if delta.size > 1 else 0.0
    return round(float(delta.mean()), 12), round(se, 12), int((delta > 0).sum()), delta.size


def _escape(values: list[Any]) -> str:
    finite = _finite(values)
    if not finite:
        return f"never 0/{len(values)}"
    text = f"{np.mean(finite):.0f} ±{np.std(finite, ddof=1) if len(finite) > 1 else 0:.0f}"
    return text if len(finite) == len(values) else f"{text} {len(finite)}/{len(values)}"


def horizons(data: dict[str, Any]) -> list[int]:
    """The steps of the ``accuracy_at_<step>`` summaries, in order."""
    summary = data["arms"][0]["summary"]
    return sorted(int(key.rsplit("_", 1)[1]) for key in summary if key.startswith("accuracy_at_"))


def _by_type(data: dict[str, Any]) -> bool:
    """Whether the table splits the final accuracy into hard and routine prompt types (the
    difficulty experiment, whose estimators differ in how they treat the two)."""
    return bool(data["config"]["name"] == "difficulty")


def experiment_columns(data: dict[str, Any]) -> list[str]:
    """Column titles of an experiment's table."""
    last = "final KL" if data["config"]["name"] in ("kappa", "kl") else "entropy"
    gaps = [f"gap@{h}" for h in horizons(data)]
    by_type = ["hard acc", "routine acc"] if _by_type(data) else []
    return ["arm", "final acc", *by_type, *gaps, "found", "escape", last]


def experiment_rows(data: dict[str, Any]) -> list[list[str]]:
    """One row per arm (mean ±std over seeds), then the ceiling and the oracle.

    ``hard acc``, ``routine acc`` (the difficulty experiment only): the final accuracy
    on prompts of hard and of routine types; ``gap@t``: the ceiling minus the accuracy at
    step t (points, lower is better); ``found``: hard types whose specialist has
    probability > 0.5 at the end (mean over seeds, out of the task's hard types);
    ``escape``: the first step at which the hard-type accuracy reaches half the held-out
    bound's (seeds that got there).
    """
    ceiling = data["ceiling"]
    hard_types = data["config"]["task"]["hard_types"]
    kl = data["config"]["name"] in ("kappa", "kl")
    kinds = ("accuracy_hard", "accuracy_routine") if _by_type(data) else ()
    rows = []
    for arm in data["arms"]:
        s = arm["summary"]
        gaps = []
        for h in horizons(data):
            per_seed = s[f"accuracy_at_{h}"]["per_seed"]
            gaps.append(_mean_std([ceiling["accuracy"] - v for v in _finite(per_seed)], 100, 1))
        found = _finite(s["final_hard_types_discovered"]["per_seed"])
        last_key = "final_kl_to_reference" if kl else "final_entropy"
        rows.append(
            [
                arm["label"],
                _mean_std(s["final_accuracy"]["per_seed"], 100, 1),
                *(_mean_std(s[f"final_{kind}"]["per_seed"], 100, 1) for kind in kinds),
                *gaps,
                f"{np.mean(found):.1f}/{hard_types}" if found else "n/a",
                _escape(s["escape_step"]["per_seed"]),
                f"{np.mean(_finite(s[last_key]['per_seed'])):.2f}",
            ]
        )
    blanks = [""] * (len(horizons(data)) + 3 + len(kinds))
    rows.append(
        [
            "ceiling",
            _points(ceiling["accuracy"]),
            *(_points(ceiling[kind]) for kind in kinds),
            *["0"] * len(horizons(data)),
            f"{ceiling['hard_types_discovered']}/{hard_types}",
            "",
            "",
        ]
    )
    rows.append(["oracle", _points(data["oracle_accuracy"]), *blanks])
    return rows


def experiment_title(data: dict[str, Any]) -> str:
    config = data["config"]
    task = config["task"]
    share = _hard_share(task)
    per_type = share / task["hard_types"] if task["hard_types"] else 0.0
    sizes = config.get("group_sizes") or [config["group_size"]]
    group = f"G={sizes[0]}" if len(sizes) == 1 else "G swept"
    return (
        f"{config['name']}, {data['regime']} regime: {task['routine_types']} routine + "
        f"{task['hard_types']} hard types, {100 * per_type:.1f} % of prompts each; "
        f"{len(config['seeds'])} seeds × {config['steps']} steps, {group}, "
        f"B={config['prompts_per_step']} (mean ±std over seeds)"
    )


def short_title(data: dict[str, Any]) -> str:
    """One terminal line: experiment, regime, types, seeds×steps."""
    config = data["config"]
    task = config["task"]
    per_type = _hard_share(task) / task["hard_types"] if task["hard_types"] else 0.0
    return (
        f"{config['name']} · {data['regime']}: {task['routine_types']} routine + "
        f"{task['hard_types']} hard types ({100 * per_type:.1f} % each) · "
        f"{len(config['seeds'])}×{config['steps']} steps"
    )


def _hard_share(task: dict[str, Any]) -> float:
    if task.get("hard_share") is not None:
        return float(task["hard_share"])
    return float(task["hard_types"] / (task["routine_types"] + task["hard_types"]))


def _arm(data: dict[str, Any], label: str) -> dict[str, Any] | None:
    return next((arm for arm in data["arms"] if arm["label"] == label), None)


def _per_seed(arm: dict[str, Any], key: str) -> list[Any]:
    values: list[Any] = arm["summary"][key]["per_seed"]
    return values


def _difference_text(delta: float, se: float, when: str) -> str:
    if not math.isfinite(delta):
        return f"no paired seeds {when}"
    if abs(delta) <= SIGNIFICANCE * se or abs(delta) < 0.0005:
        return f"ends level {when} ({100 * delta:+.1f} {_pm(se)} points)"
    direction = "higher" if delta > 0 else "lower"
    return f"ends {100 * abs(delta):.1f} {_pm(se)} points {direction} {when}"


def _mean_escape(arm: dict[str, Any]) -> tuple[float, int, int]:
    values = _per_seed(arm, "escape_step")
    finite = _finite(values)
    return (float(np.mean(finite)) if finite else math.nan), len(finite), len(values)


def compare_reading(data: dict[str, Any], other: str) -> str:
    """Budget against ``other``: escape, hard types found, final accuracy (paired)."""
    mine, theirs = _arm(data, REFERENCE), _arm(data, other)
    if mine is None or theirs is None:
        return f"Reading: needs the {REFERENCE} and {other} arms."
    steps = data["config"]["steps"]
    hard_types = data["config"]["task"]["hard_types"]
    parts = []
    escape_mine, got_mine, seeds = _mean_escape(mine)
    escape_theirs, got_theirs, _ = _mean_escape(theirs)
    if got_mine == seeds and got_theirs == seeds:
        change = 1 - escape_mine / escape_theirs
        word = "earlier" if change > 0 else "later"
        parts.append(
            f"budgeting leaves the plateau {100 * abs(change):.0f} % {word} than {other} "
            f"(step {escape_mine:.0f} vs {escape_theirs:.0f})"
        )
    else:
        parts.append(
            f"the plateau is left in {got_mine}/{seeds} seeds with budgeting and "
            f"{got_theirs}/{seeds} with {other}"
        )
    found_theirs = _finite(_per_seed(theirs, "final_hard_types_discovered"))
    found_mine = _finite(_per_seed(mine, "final_hard_types_discovered"))
    all_found = sum(1 for f in found_theirs if f >= hard_types)
    if all_found == len(found_theirs):
        parts.append(f"{other} finds all {hard_types} hard types in every seed")
    else:
        parts.append(
            f"{other} finds {np.mean(found_theirs):.1f} of {hard_types} hard types, "
            f"budgeting {np.mean(found_mine):.1f}"
        )
    delta, se, _, _ = paired(_per_seed(mine, "final_accuracy"), _per_seed(theirs, "final_accuracy"))
    parts.append(f"budgeting {_difference_text(delta, se, f'at step {steps}')}")
    return "Reading: " + "; ".join(parts) + "."


def sweep_reading(data: dict[str, Any]) -> str:
    """For each estimator: the best arm by final accuracy and how the others compare."""
    name = data["config"]["name"]
    if name == "compare":
        others = [a["run"]["estimator"] for a in data["arms"] if a["run"]["estimator"] != REFERENCE]
        first = "grpo" if "grpo" in others else (others[0] if others else REFERENCE)
        return compare_reading(data, first)
    if name == "group-size":
        return _group_size_reading(data)
    if name == "difficulty":
        return _difficulty_reading(data)
    steps = data["config"]["steps"]
    parts = []
    estimators = list(dict.fromkeys(arm["run"]["estimator"] for arm in data["arms"]))
    for estimator in estimators:
        arms = [arm for arm in data["arms"] if arm["run"]["estimator"] == estimator]
        baseline = arms[0]  # no KL (κ = ∞), or no bonus
        best = max(arms, key=lambda arm: arm["summary"]["final_accuracy"]["mean"])
        worst = min(arms, key=lambda arm: arm["summary"]["final_accuracy"]["mean"])
        delta, se, _, _ = paired(
            _per_seed(best, "final_accuracy"), _per_seed(baseline, "final_accuracy")
        )
        settings = best["label"].removeprefix(estimator).strip()
        if best is baseline or abs(delta) <= SIGNIFICANCE * se:
            text = f"{estimator}: nothing beats {baseline['label'].removeprefix(estimator).strip()}"
        else:
            base = baseline["label"].removeprefix(estimator).strip()
            text = f"{estimator}: {settings} is best, {100 * delta:+.1f} {_pm(se)} vs {base}"
        if worst is not best:
            gap = (
                best["summary"]["final_accuracy"]["mean"]
                - worst["summary"]["final_accuracy"]["mean"]
            )
            worst_settings = worst["label"].removeprefix(estimator).strip()
            text += f" ({worst_settings} {100 * gap:.1f} below the best)"
        if name == "entropy":
            fastest = min(arms, key=_escape_or_never)
            escape, got, seeds = _mean_escape(fastest)
            base_escape, base_got, _ = _mean_escape(baseline)
            if fastest is not baseline and got == seeds and base_got == seeds:
                settings = fastest["label"].removeprefix(estimator).strip()
                text += f", escape {base_escape:.0f} -> {escape:.0f} with {settings}"
        parts.append(text)
    return f"Reading (final accuracy at step {steps}, points): " + "; ".join(parts) + "."


def _final(arm: dict[str, Any]) -> float:
    return float(arm["summary"]["final_accuracy"]["mean"])


def _escape_or_never(arm: dict[str, Any]) -> float:
    """Mean escape step when every seed escaped, else infinity (for sorting)."""
    escape, got, seeds = _mean_escape(arm)
    return escape if got == seeds else math.inf


def _group_size_reading(data: dict[str, Any]) -> str:
    steps = data["config"]["steps"]
    sizes = data["config"]["group_sizes"]
    parts = []
    for other in ("grpo", "dr"):
        cells = []
        for size in sizes:
            mine = _arm(data, f"{REFERENCE} G={size}")
            theirs = _arm(data, f"{other} G={size}")
            if mine is None or theirs is None:
                continue
            delta, se, _, _ = paired(
                _per_seed(mine, "final_accuracy"), _per_seed(theirs, "final_accuracy")
            )
            cells.append(f"G={size} {100 * delta:+.1f} {_pm(se)}")
        if cells:
            parts.append(f"budget − {other}: " + ", ".join(cells))
    return f"Reading (final accuracy at step {steps}, paired, points): " + "; ".join(parts) + "."


def _difficulty_reading(data: dict[str, Any]) -> str:
    """Budget against every other arm, paired by seed: final accuracy, then its hard- and
    routine-type parts (where a difficulty-aware estimator gains and what it pays)."""
    mine = _arm(data, REFERENCE)
    if mine is None:
        return f"Reading: needs the {REFERENCE} arm."
    parts = []
    for theirs in data["arms"]:
        if theirs is mine:
            continue
        cells = []
        for key in ("final_accuracy", "final_accuracy_hard", "final_accuracy_routine"):
            delta, se, _, _ = paired(_per_seed(mine, key), _per_seed(theirs, key))
            cells.append(f"{100 * delta:+.1f} {_pm(se)}")
        parts.append(f"{theirs['label']} {cells[0]} (hard {cells[1]}, routine {cells[2]})")
    steps = data["config"]["steps"]
    return (
        f"Reading (budget − each arm at step {steps}, paired, points: final accuracy, and "
        "on hard and routine types): " + "; ".join(parts) + "."
    )


# The map ------------------------------------------------------------------------------


def map_columns(data: dict[str, Any]) -> list[str]:
    totals = data["config"]["total_types"]
    return ["hard types", *(f"each 1/{t} ({100 / t:.1f} %)" for t in totals)]


def map_rows(data: dict[str, Any], other: str) -> list[list[str]]:
    """Rows: hard types; columns: per-type frequency; cells: budget − other ± SE."""
    cells = {(c["hard_types"], c["total_types"]): c for c in data["cells"]}
    rows = []
    for hard in data["config"]["hard_types"]:
        row = [str(hard)]
        for total in data["config"]["total_types"]:
            difference = cells[(hard, total)]["difference"][other]
            row.append(f"{100 * difference['mean']:+.1f} {_pm(difference['se'])}")
        rows.append(row)
    return rows


def map_detail_rows(data: dict[str, Any]) -> list[list[str]]:
    """Per cell: ceiling, each estimator's final accuracy and hard types found (means)."""
    estimators = data["config"]["estimators"]
    rows = []
    for cell in data["cells"]:
        row = [
            f"{cell['hard_types']} of {cell['total_types']}",
            _points(float(np.mean(cell["ceiling"]))),
        ]
        for name in estimators:
            arm = cell["arms"][name]
            found = float(np.mean(arm["hard_types_discovered"]))
            row.append(f"{_points(float(np.mean(arm['final_accuracy'])))} ({found:.1f})")
        rows.append(row)
    return rows


def map_detail_columns(data: dict[str, Any]) -> list[str]:
    return ["hard of all types", "ceiling", *data["config"]["estimators"]]


def map_reading(data: dict[str, Any]) -> str:
    """Split the cells by whether the baseline found every hard type in every seed, and
    give the range of budget − baseline in each part, with the count beyond 2 SE."""
    parts = []
    steps = data["config"]["steps"]
    for other in data["config"]["estimators"][1:]:
        found_all: list[float] = []
        missed: list[float] = []
        wins = losses = 0
        for cell in data["cells"]:
            difference = cell["difference"][other]
            if difference["mean"] > SIGNIFICANCE * difference["se"]:
                wins += 1
            elif difference["mean"] < -SIGNIFICANCE * difference["se"]:
                losses += 1
            found = _finite(cell["arms"][other]["hard_types_discovered"])
            everything = bool(found) and min(found) >= cell["hard_types"]
            (found_all if everything else missed).append(100 * difference["mean"])
        text = [f"vs {other}:"]
        if found_all:
            text.append(
                f"where {other} finds every hard type ({len(found_all)} cells) budgeting "
                f"ends {_range(found_all)}"
            )
        if missed:
            text.append(
                ("and " if found_all else "")
                + f"where it leaves some unfound ({len(missed)} cells) {_range(missed)}"
            )
        text.append(f"(beyond 2 SE: ahead in {wins}, behind in {losses} of {len(data['cells'])})")
        parts.append(" ".join(text))
    return f"Reading (final accuracy at step {steps}, points): " + "; ".join(parts) + "."


def _range(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:+.1f}" if low == high else f"{low:+.1f} to {high:+.1f}"


def _cell_text(cell: dict[str, Any], other: str) -> str:
    difference = cell["difference"][other]
    return (
        f"{100 * difference['mean']:+.1f} at {cell['hard_types']} hard types of "
        f"1/{cell['total_types']} each"
    )


def map_title(data: dict[str, Any]) -> str:
    config = data["config"]
    return (
        f"map: budget − {{other}}, final accuracy at step {config['steps']} (points), "
        f"mean ±SE over {len(config['seeds'])} paired seeds (each its own task draw)"
    )


# The task itself ----------------------------------------------------------------------


def describe_task(config: Any, group_size: int = 8) -> dict[str, Any]:
    """Reference points of a task: the oracle, the ceiling and the initial policy.

    Examples:
        >>> from advbudget.lab.sim import TaskConfig
        >>> from advbudget.lab.sim._report import describe_task
        >>> facts = describe_task(TaskConfig(train_prompts=8, validation_prompts=256))
        >>> facts["ceiling"] < facts["oracle"]
        True
    """
    from ._ceiling import task_ceiling
    from ._task import exact_metrics, log_policy, make_task

    task = make_task(config)
    ceiling = task_ceiling(config)
    initial = exact_metrics(task.initial_weights, task.validation)
    probs = np.exp(log_policy(task.initial_weights, task.validation.features))
    solved = (probs * task.validation.success).sum(axis=1)
    skipped = float(np.mean(solved**group_size + (1 - solved) ** group_size))
    frequencies = config.type_frequencies
    return {
        "routine_types": config.routine_types,
        "hard_types": config.hard_types,
        "hard_type_frequency": float(frequencies[-1]) if config.hard_types else 0.0,
        "hard_share": float(frequencies[config.routine_types :].sum()),
        "specialist_probability": float(probs[:, -1].mean()) if config.hard_types else 0.0,
        "oracle": float(task.validation.success.max(axis=1).mean()),
        "ceiling": ceiling.accuracy,
        "ceiling_hard": ceiling.accuracy_hard,
        "initial": initial["accuracy"],
        "initial_routine": initial["accuracy_routine"],
        "initial_hard": initial["accuracy_hard"],
        "initial_pass_at_8": initial["pass_at_8"],
        "initial_entropy": initial["entropy"],
        "initial_skipped": skipped,
        "group_size": group_size,
    }


TASK_COLUMNS = [
    "regime",
    "types",
    "each hard type",
    "oracle",
    "ceiling",
    "ceiling, hard types",
    "start",
    "start, hard types",
    "start: groups skipped",
]
# The terminal's headers, two lines each so that the table fits 80 columns.
TASK_HEADERS = ["regime", "types", "hard\ntype", "oracle", "ceiling", "ceiling\nhard",
                "start", "start\nhard", "start\nskipped"]  # fmt: skip


def task_row(name: str, facts: dict[str, Any]) -> list[str]:
    return [
        name,
        f"{facts['routine_types']} + {facts['hard_types']}",
        f"{100 * facts['hard_type_frequency']:.1f} %",
        _points(facts["oracle"]),
        _points(facts["ceiling"]),
        _points(facts["ceiling_hard"]),
        _points(facts["initial"]),
        _points(facts["initial_hard"]),
        f"{100 * facts['initial_skipped']:.0f} %",
    ]
