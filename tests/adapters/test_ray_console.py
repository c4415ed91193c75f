"""The console parser of the Ray loop tests joins what Ray's log monitor cut, wherever it cut."""

from __future__ import annotations

import re

from .ray_console import console_text, logged_dicts, logged_reprs

OPENRLHF_STATUS = re.compile(r" Global step (\d+): ")
SKYRL_STEP = re.compile(r"tracking:log:\d+ - Step (\d+):\s*$")


def test_a_status_line_cut_anywhere_is_read_whole() -> None:
    line = "INFO ppo_trainer.py:551] ✨ Global step 2: {'a': 1.5, 'b': nan, 'c': 'nan'}"
    for cut in range(1, len(line)):
        console = "\n".join([
            "(PPOTrainer pid=7) I ✨ Global step 1: {'a': 0}",
            f"(PPOTrainer pid=7) {line[:cut]}",
            "(PolicyModelActor pid=3) a line of another worker",
            f"(PPOTrainer pid=7) {line[cut:]}",
            "(PPOTrainer pid=7) Episode [3/3]",
        ])  # fmt: skip
        found = [(pid, int(m[1]), d) for pid, m, d in logged_dicts(console, OPENRLHF_STATUS)]
        assert found == [(7, 1, {"a": 0}), (7, 2, {"a": 1.5, "b": None, "c": "nan"})], cut


def test_a_pformat_payload_cut_anywhere_is_read_whole() -> None:
    lines = ["tracking:log:12 - Step 3:", "{'x': '0.1234',", " 'y': 2}"]
    for i, line in enumerate(lines):
        for cut in range(1, len(line)):
            pieces = [*lines[:i], line[:cut], line[cut:], *lines[i + 1 :]]
            console = "\n".join(f"(skyrl_entrypoint pid=9) {piece}" for piece in pieces)
            found = [(int(m[1]), d) for _, m, d in logged_dicts(console, SKYRL_STEP)]
            assert found == [(3, {"x": "0.1234", "y": 2})], (i, cut)


def test_the_console_keeps_carriage_returns_and_drops_colours() -> None:
    assert console_text(b"\x1b[36m(A pid=1)\x1b[0m 10%\r(B) step") == "(A pid=1) 10%\r(B) step"


def test_a_repr_that_is_no_literal_is_read_to_its_closing_brace() -> None:
    line = "INFO checkpoint_states: {'a': tensor([1, 2]), 'b': '}{', 'c': {'d': \"it's\"}} done"
    for cut in range(1, len(line)):
        console = f"(PPOTrainer pid=5) {line[:cut]}\n(PPOTrainer pid=5) {line[cut:]}"
        (found,) = logged_reprs(console, re.compile(r"checkpoint_states: "))
        assert found[2] == line[line.index("{") : line.index(" done")], cut
