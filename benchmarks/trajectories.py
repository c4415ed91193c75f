"""What multi-turn rows cost: ``compute_advantages(rewards, "budget", group_ids=prompts,
trajectory_ids=trajs)`` on rows (turns) against the same call on one reward per
trajectory, in one run.

On numpy: N rows of 0/1 rewards, N/4 trajectories of 1 to 7 rows (4 on average), G = 4
trajectories per prompt, the rows shuffled (every trajectory's rows apart), the reward on
each trajectory's last row and NaN on its others. Target (issue 34): the rows cost at most
twice the trajectory-level call plus one grouping of the rows' trajectory labels, timed
here as one path doing exactly that. Each call must equal the trajectory-level advantages
on every row.

    python benchmarks/trajectories.py [--sizes 65536,1048576] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
from _harness import Target, machine_info, size_arguments, size_row, write_size_report

from advbudget import compute_advantages, make_groups

TARGET_N = 1_048_576
TRAJECTORIES_PER_PROMPT = 4
ROWS_PER_TRAJECTORY = 4


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = size_arguments(
        __doc__.splitlines()[0],
        "trajectories",
        sizes=(65_536, TARGET_N),
        multiple_of=ROWS_PER_TRAJECTORY * TRAJECTORIES_PER_PROMPT,
        repeats=5,
    )
    return parser.parse_args(argv)


def make_rows(n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Shuffled rows (rewards, prompt of each row, trajectory of each row), and the
    trajectories' rewards and prompts in order of first row."""
    rng = np.random.default_rng(seed)
    count = n // ROWS_PER_TRAJECTORY
    lengths = rng.integers(1, 2 * ROWS_PER_TRAJECTORY, count)  # 1..7, mean 4
    lengths[-1] += n - int(lengths.sum())  # exactly n rows
    while lengths[-1] < 1:  # rare: borrow rows from the longest trajectories
        longest = int(np.argmax(lengths[:-1]))
        lengths[longest] -= 1
        lengths[-1] += 1
    trajectory = np.repeat(np.arange(count), lengths)
    last = np.cumsum(lengths) - 1
    reward = (rng.random(count) < 0.4).astype(np.float64)
    rewards = np.full(n, np.nan)
    rewards[last] = reward
    order = rng.permutation(n)
    rows, trajs = rewards[order], trajectory[order]
    prompts = trajs // TRAJECTORIES_PER_PROMPT
    first = np.sort(np.unique(trajs, return_index=True)[1])  # in order of first row
    return rows, prompts, trajs, reward[trajs[first]], prompts[first]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info(("numpy",))
    results, problems = [], []
    for n in args.sizes:
        rows, prompts, trajs, reward, level_prompts = make_rows(n)

        def level(r: np.ndarray = reward, p: np.ndarray = level_prompts) -> object:
            return compute_advantages(r, "budget", group_ids=p)

        def on_rows(r: np.ndarray = rows, p: np.ndarray = prompts, t: np.ndarray = trajs) -> object:
            return compute_advantages(r, "budget", group_ids=p, trajectory_ids=t)

        def bound(r: np.ndarray = rows, t: np.ndarray = trajs) -> None:
            level()
            level()
            make_groups(r, group_ids=t)

        got = on_rows()
        want = level()
        index = np.asarray(got.trajectories.index)
        if not np.array_equal(np.asarray(got.advantages), np.asarray(want.advantages)[index]):
            problems.append(f"N={n}: the rows' advantages are not their trajectories'")
        paths = {
            "trajectory level": level,
            "2 x trajectory level + one grouping": bound,
            "rows (trajectory_ids)": on_rows,
        }
        results += [size_row(n, path, run, args.repeats) for path, run in paths.items()]
    targets = [
        Target(
            "rows / (2 x trajectory level + one grouping)",
            "rows (trajectory_ids)",
            "2 x trajectory level + one grouping",
            1.0,
        ),
        Target("rows / trajectory level", "rows (trajectory_ids)", "trajectory level"),
    ]
    intro = (
        f"numpy, budget, N rows of N/{ROWS_PER_TRAJECTORY} trajectories (1 to 7 rows), "
        f"{TRAJECTORIES_PER_PROMPT} trajectories per prompt, rows shuffled, the reward on "
        "each trajectory's last row; median of the timed calls "
        "(`python benchmarks/trajectories.py`)."
    )
    return write_size_report(
        args.output,
        "What multi-turn rows cost",
        intro,
        machine,
        results,
        targets,
        problems,
        judged_n=TARGET_N,
    )


if __name__ == "__main__":
    sys.exit(main())
