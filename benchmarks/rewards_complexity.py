"""Complexity benchmark of the rewards on degenerate responses: time against length.

A rollout cut at the length cap can be anything: a run of newlines, an end-of-turn token
repeated, ``\\boxed{`` opened and never closed. A reward that is quadratic in such a
response holds the GIL of the rollout actor for seconds. This times every reward entry
point (``dapo_reward``, ``math_verify_reward``, verl's ``compute_score``, the TRL reward
functions, OpenRLHF's ``reward_func``, each with both graders where it has a choice) on
degenerate responses of 1k to 1M characters and fits the growth exponent (the log-log
slope of time against length) between 64k and 1M characters. Target: an exponent
<= 1.1 for every path (reported, never enforced: timings on a shared machine are noisy).

Writes ``results/rewards_complexity.json`` and ``results/rewards_complexity.md``.

Run: ``python benchmarks/rewards_complexity.py`` (``make bench-rewards``), ``--quick``
for a smoke run (sizes up to 64k, one repeat).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import machine_info, machine_line, table, time_call, write_results

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "rewards_complexity.json"
SIZES = (1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000)
FIT_FROM, FIT_TO = 64_000, 1_000_000
TARGET_EXPONENT = 1.1


def _repeat(unit: str, n: int) -> str:
    """``unit`` repeated to exactly ``n`` characters (the last copy cut)."""
    return (unit * (n // len(unit) + 1))[:n]


# Degenerate responses of exactly n characters, as a rollout cut at the cap leaves them.
RESPONSES: dict[str, Callable[[int], str]] = {
    "newlines": lambda n: "\n" * n,
    "spaces and newlines": lambda n: _repeat(" \n", n),
    "<|im_end|> repeated": lambda n: _repeat("<|im_end|>", n),
    "<|im_end|> repeated, then whitespace": lambda n: (
        _repeat("<|im_end|>", n // 2) + "\n" * (n - n // 2)
    ),
    "<|endoftext|>\\n repeated": lambda n: _repeat("<|endoftext|>\n", n),
    "nested \\boxed{ never closed": lambda n: _repeat("\\boxed{", n),
    "Answer: repeated": lambda n: _repeat("Answer:", n),
    "$ repeated": lambda n: "$" * n,
    "\\[ repeated (never closed)": lambda n: _repeat("\\[", n),
}


def reward_paths() -> dict[str, Callable[[str], Any]]:
    """Each reward entry point as a function of one response (ground truth "34")."""
    from advbudget.adapters.openrlhf.rewards import reward_func
    from advbudget.adapters.trl.rewards import dapo_accuracy, math_verify_accuracy
    from advbudget.adapters.verl.rewards import compute_score
    from advbudget.rewards import dapo_reward, math_verify_reward

    def openrlhf(method: str) -> Callable[[str], Any]:
        def call(response: str) -> Any:
            previous = os.environ.get("ADVBUDGET_REWARD_METHOD")
            os.environ["ADVBUDGET_REWARD_METHOD"] = method
            try:
                # The prompt is cut off the query first, as OpenRLHF passes them.
                return reward_func(["Q: " + response], ["Q: "], ["34"])
            finally:
                if previous is None:
                    del os.environ["ADVBUDGET_REWARD_METHOD"]
                else:
                    os.environ["ADVBUDGET_REWARD_METHOD"] = previous

        return call

    return {
        "dapo_reward": lambda r: dapo_reward(r, "34"),
        "math_verify_reward": lambda r: math_verify_reward(r, "34"),
        "verl compute_score (dapo)": lambda r: compute_score("math_dapo", r, "34"),
        "verl compute_score (math_verify)": lambda r: compute_score(
            "math_dapo", r, "34", method="math_verify"
        ),
        "trl dapo_accuracy": lambda r: dapo_accuracy([r], ["34"]),
        "trl math_verify_accuracy": lambda r: math_verify_accuracy(
            [[{"role": "assistant", "content": r}]], ["34"]
        ),
        "openrlhf reward_func (dapo)": openrlhf("dapo"),
        "openrlhf reward_func (math_verify)": openrlhf("math_verify"),
    }


def best_time(call: Callable[[str], Any], response: str, repeats: int) -> float:
    """The best of ``repeats`` timings (one only when a call takes over half a second)."""
    return min(time_call(lambda: call(response), repeats=repeats, warmup=0, stop_above=0.5))


def exponent(times: dict[int, float], lo: int, hi: int, floor: float = 1e-4) -> float:
    """The least-squares log-log slope of time against length over the sizes in
    [lo, hi]; times are floored at 0.1 ms (below that a timing is noise)."""
    points = [(math.log(n), math.log(max(t, floor))) for n, t in times.items() if lo <= n <= hi]
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def measure(
    sizes: Sequence[int], repeats: int, paths: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    calls = reward_paths()
    rows = []
    for path, call in calls.items():
        if paths is not None and path not in paths:
            continue
        call("Answer: 34")  # warm up: imports (torch, math-verify), regex caches
        for kind, make in RESPONSES.items():
            times = {n: best_time(call, make(n), repeats) for n in sizes}
            row: dict[str, Any] = {"path": path, "response": kind, "seconds": times}
            lo, hi = min(sizes), max(sizes)
            fit = (FIT_FROM, FIT_TO) if {FIT_FROM, FIT_TO} <= set(sizes) else (lo, hi)
            row["fit"] = list(fit)
            row["exponent"] = exponent(times, fit[0], fit[1])
            rows.append(row)
            print(
                f"{path:36s} {kind:40s} "
                + " ".join(f"{times[n] * 1e3:9.2f}" for n in sizes)
                + f"  exp {row['exponent']:.2f}",
                flush=True,
            )
    return rows


def render(rows: list[dict[str, Any]], sizes: Sequence[int], machine: dict[str, Any]) -> str:
    def label(n: int) -> str:
        return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"

    worst = max(row["exponent"] for row in rows)
    fit = rows[0]["fit"]
    lines = [
        "# advbudget rewards: time against response length",
        "",
        f"{machine_line(machine)} · math-verify {machine['packages']['math-verify']}",
        "",
        "Each reward entry point on degenerate responses (ground truth `34`), best of "
        f"{machine['repeats']} calls, in ms; the exponent is the least-squares log-log slope "
        f"of time against length from {label(fit[0])} to {label(fit[1])} characters, times "
        f"floored at 0.1 ms (target <= "
        f"{TARGET_EXPONENT}; a flat time reads as about 0). Worst exponent: {worst:.2f}.",
        "",
        "The DAPO rule reads the last 300 characters; math-verify the last 8192 "
        "(`advbudget.rewards._math_verify.MAX_RESPONSE_CHARS`: it is quadratic on "
        "degenerate text, e.g. unclosed `\\[` repeated: 1.3 s at 8k characters, 82 s at "
        "64k); OpenRLHF's trailing special tokens are peeled off from the end in linear "
        "time. Before these bounds, OpenRLHF's token regex took 0.23 s at 8k newlines, "
        "2.9 s at 32k and 13 s at 64k, and math-verify 1.9 s on 256k characters of "
        "unclosed `\\boxed{`.",
        "",
    ]
    lines += table(
        ["path", "response", *(label(n) for n in sizes), "exponent"],
        (
            [row["path"], row["response"].replace("|", "\\|"),
             *(f"{row['seconds'][n] * 1e3:.2f}" for n in sizes), f"{row['exponent']:.2f}"]
            for row in rows
        ),
        "ll" + "r" * (len(sizes) + 1),
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 64k, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON result path")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # math-verify warns once that timeouts are off
    sizes = SIZES[:4] if args.quick else SIZES
    repeats = 1 if args.quick else args.repeats
    machine = machine_info(("math-verify",), repeats=repeats)
    rows = measure(sizes, repeats)
    report = render(rows, sizes, machine)
    for row in rows:
        row["seconds"] = {str(n): t for n, t in row["seconds"].items()}
    payload = {"machine": machine, "sizes": list(sizes), "target": TARGET_EXPONENT, "results": rows}
    write_results(args.output, payload, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
