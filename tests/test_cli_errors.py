"""Every CLI command fails cleanly: one line on stderr, an exit code, no partial output.

For each command: a bad path, a read-only destination, a full disk (a write raising
ENOSPC) and Ctrl-C (KeyboardInterrupt mid-run; once a real SIGINT to a subprocess).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advbudget.cli import app

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_error_line(result, code: int, *fragments: str) -> str:
    """The exit code is ``code`` and stderr is one ``error:`` line holding ``fragments``."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def read_only(tmp_path) -> Path:
    """A folder nothing can be written under. chmod 0o500 does not stop root, so as root
    this is a path under /sys (sysfs refuses new entries); skipped if neither works."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    folder = Path("/sys/advbudget-test-read-only")
    try:
        folder.mkdir()
    except OSError:
        yield folder
        return
    folder.rmdir()
    pytest.skip("running as root, and /sys takes new folders: no read-only place to test")


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


# data prepare -------------------------------------------------------------------------


def test_data_prepare_output_dir_is_a_file(a_file):
    result = invoke("data", "prepare", "--sample", "-o", str(a_file))
    one_error_line(result, 1, "--output-dir", str(a_file), "not a folder")
    assert a_file.read_text() == "not a folder\n"


def test_data_prepare_output_dir_under_a_file(a_file):
    result = invoke("data", "prepare", "--sample", "-o", str(a_file / "out"))
    one_error_line(result, 1, "--output-dir", str(a_file), "is a file")


def test_data_prepare_missing_and_folder_sources(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = invoke("data", "prepare", "--source", str(missing), "-o", str(tmp_path / "out"))
    one_error_line(result, 1, str(missing), "no such file")
    folder = tmp_path / "folder"
    folder.mkdir()
    result = invoke("data", "prepare", "--source", str(folder), "-o", str(tmp_path / "out"))
    one_error_line(result, 1, str(folder))
    assert tree(tmp_path) == ["folder"]


def test_data_prepare_read_only(read_only):
    result = invoke("data", "prepare", "--sample", "-o", str(read_only / "out"))
    one_error_line(result, 1, "--output-dir", str(read_only / "out"), "cannot write")


def test_data_prepare_full_disk_leaves_nothing(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    def full(table, where, **options):
        Path(where).write_bytes(b"PAR1 half a file")
        raise ENOSPC

    monkeypatch.setattr(pq, "write_table", full)
    result = invoke("data", "prepare", "--sample", "-o", str(tmp_path / "new" / "out"))
    one_error_line(result, 1, "No space left on device")
    assert tree(tmp_path) == []


@pytest.mark.parametrize("existing", [False, True])
def test_data_prepare_ctrl_c_leaves_nothing(tmp_path, monkeypatch, existing):
    from advbudget.data import _writers

    out = tmp_path / "out"
    if existing:  # an earlier run's files are kept as they were
        (out / "verl").mkdir(parents=True)
        (out / "verl" / "train.parquet").write_text("earlier")

    def interrupted(splits, folder):
        raise KeyboardInterrupt

    # verl and trl are written first; openrlhf is interrupted.
    monkeypatch.setitem(_writers.WRITERS, "openrlhf", interrupted)
    result = invoke("data", "prepare", "--sample", "-o", str(out))
    one_error_line(result, 130, "interrupted")
    if existing:
        assert tree(tmp_path) == ["out", "out/verl", "out/verl/train.parquet"]
        assert (out / "verl" / "train.parquet").read_text() == "earlier"
    else:
        assert tree(tmp_path) == []


def test_data_prepare_still_writes_into_an_existing_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = invoke("data", "prepare", "--sample", "-o", str(tmp_path), "--format", "trl")
    assert result.exit_code == 0, result.output
    assert tree(tmp_path) == ["keep.txt", "trl", "trl/train.parquet"]


# eval ---------------------------------------------------------------------------------


class Scripted:
    """Answers correctly in the first ``index % (n + 1)`` samples; two prompts a call;
    ``fail_on`` the chunk at which to raise (KeyboardInterrupt, OSError, ...)."""

    chunk_size = 2

    def __init__(self, fail_on: int | None = None, error: BaseException | None = None):
        self.calls, self.fail_on, self.error = 0, fail_on, error

    def generate(self, messages, *, n, temperature, max_new_tokens, seed=None):
        if self.calls == self.fail_on:
            assert self.error is not None
            raise self.error
        self.calls += 1
        outputs = []
        for chat in messages:
            answer = chat[-1]["content"].split("ANSWER=")[1].split()[0]
            right = int(answer) % (n + 1)
            outputs.append([f"Answer: {answer}"] * right + ["Answer: nope"] * (n - right))
        return outputs


@pytest.fixture
def bench(tmp_path) -> Path:
    path = tmp_path / "bench.jsonl"
    rows = [{"problem": f"Say ANSWER={i} please", "answer": str(i)} for i in range(7)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def use(monkeypatch, generator: Scripted) -> None:
    monkeypatch.setattr("advbudget.eval._run.make_generator", lambda *a, **k: generator)


def run_eval(bench: Path, out: Path, *extra: str):
    return invoke("eval", "--model", "m", "--benchmarks", str(bench), "--n", "3", "--k", "1",
                  "--k", "3", "--grader", "dapo", "--output-dir", str(out), *extra)  # fmt: skip


def test_eval_output_dir_is_a_file(bench, a_file, monkeypatch):
    use(monkeypatch, Scripted())
    one_error_line(run_eval(bench, a_file), 1, "--output-dir", str(a_file), "not a folder")


def test_eval_missing_benchmark_file(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = run_eval(missing, tmp_path / "out")
    one_error_line(result, 2, str(missing), "no such file")
    assert tree(tmp_path) == []


def test_eval_read_only(bench, read_only, monkeypatch):
    use(monkeypatch, Scripted())
    one_error_line(run_eval(bench, read_only / "out"), 1, "--output-dir", "cannot write")


def test_eval_full_disk_before_anything_is_saved_leaves_nothing(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted())

    def full(fd):
        raise ENOSPC

    monkeypatch.setattr(os, "fsync", full)
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 1, str(tmp_path / "out"), "No space left", "nothing was written")
    assert tree(tmp_path) == ["bench.jsonl"]


def test_eval_full_disk_midway_keeps_what_is_saved_for_resume(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted(fail_on=2, error=ENOSPC))
    out = tmp_path / "out"
    result = run_eval(bench, out)
    one_error_line(result, 1, "No space left", "4 problems are saved", "--resume")
    assert not (out / "scores.json").exists()
    assert len((out / "generations.jsonl").read_text().splitlines()) == 4
    use(monkeypatch, Scripted())
    resumed = run_eval(bench, out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    fresh = run_eval(bench, tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    assert (out / "scores.json").read_text() == (tmp_path / "fresh" / "scores.json").read_text()


def test_eval_ctrl_c(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted(fail_on=0, error=KeyboardInterrupt()))
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 130, "interrupted", "nothing was written")
    assert tree(tmp_path) == ["bench.jsonl"]
    use(monkeypatch, Scripted(fail_on=1, error=KeyboardInterrupt()))
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 130, "interrupted", "2 problems are saved", "--resume")
    assert not (tmp_path / "out" / "scores.json").exists()


def test_eval_refuses_an_earlier_run_without_resume(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted())
    assert run_eval(bench, tmp_path / "out").exit_code == 0
    before = (tmp_path / "out" / "generations.jsonl").read_bytes()
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 2, "already holds 7 problems", "--resume", "--output-dir")
    assert (tmp_path / "out" / "generations.jsonl").read_bytes() == before


def test_eval_score_only_bad_paths(tmp_path, a_file):
    missing = tmp_path / "missing.jsonl"
    out = tmp_path / "re"
    one_error_line(invoke("eval", "--score-only", str(missing), "--output-dir", str(out)), 1,
                   "--score-only", str(missing), "no such file")  # fmt: skip
    one_error_line(invoke("eval", "--score-only", str(tmp_path), "--output-dir", str(out)), 1,
                   "--score-only", "is a folder")  # fmt: skip
    generations = tmp_path / "g.jsonl"
    generations.write_text('{"benchmark": "b", "answer": "1", "samples": ["Answer: 1"]}\n')
    one_error_line(invoke("eval", "--score-only", str(generations), "--output-dir", str(a_file)),
                   1, "--output-dir", "not a folder")  # fmt: skip
    assert tree(tmp_path) == ["a-file", "g.jsonl"]


@pytest.mark.parametrize("error", [ENOSPC, KeyboardInterrupt()])
def test_eval_score_only_full_disk_and_ctrl_c_leave_nothing(tmp_path, monkeypatch, error):
    generations = tmp_path / "g.jsonl"
    generations.write_text('{"benchmark": "b", "answer": "1", "samples": ["Answer: 1"]}\n')

    def fail(fd):
        raise error

    monkeypatch.setattr(os, "fsync", fail)
    result = invoke("eval", "--score-only", str(generations), "--grader", "dapo",
                    "--output-dir", str(tmp_path / "new" / "re"))  # fmt: skip
    if isinstance(error, KeyboardInterrupt):
        one_error_line(result, 130, "interrupted")
    else:
        one_error_line(result, 1, "No space left on device")
    assert tree(tmp_path) == ["g.jsonl"]


# simulate -----------------------------------------------------------------------------

SIMULATE = ("simulate", "--quick", "--estimators", "dr", "--steps", "3")


def test_simulate_output_dir_is_a_file(a_file):
    result = invoke(*SIMULATE, "--output-dir", str(a_file))
    one_error_line(result, 1, "--output-dir", str(a_file), "not a folder")


def test_simulate_read_only_is_found_before_training(read_only, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("trained before checking --output-dir")

    monkeypatch.setattr("advbudget.sim._cli.run_experiment", never)
    result = invoke(*SIMULATE, "--output-dir", str(read_only / "out"))
    one_error_line(result, 1, "--output-dir", "cannot write")


def test_simulate_full_disk_leaves_nothing(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def full(self, where, **options):
        Path(where).write_bytes(b"\x89PNG half")
        raise ENOSPC

    monkeypatch.setattr(Figure, "savefig", full)
    result = invoke(*SIMULATE, "--output-dir", str(tmp_path / "new" / "demo"))
    one_error_line(result, 1, "No space left on device")
    assert tree(tmp_path) == []  # not even compare.json, written before the plot


def test_simulate_ctrl_c_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("advbudget.sim._cli.run_experiment", interrupted)
    result = invoke(*SIMULATE, "--output-dir", str(tmp_path / "demo"))
    one_error_line(result, 130, "interrupted")
    assert tree(tmp_path) == []


def test_simulate_sigint_to_a_real_process(tmp_path):
    """Ctrl-C as a shell sends it: SIGINT to a running `advbudget simulate`."""
    out = tmp_path / "demo"
    command = [sys.executable, "-c", "from advbudget.cli import main; main()",
               "simulate", "--quick", "--steps", "200000", "--output-dir", str(out)]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        # The temporary folder beside --output-dir appears as training starts.
        while not list(tmp_path.glob(".demo.partial-*")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == ["error: interrupted (Ctrl-C); nothing was written"]
    assert tree(tmp_path) == []


# explain --plot -----------------------------------------------------------------------


def test_explain_plot_bad_paths(tmp_path, a_file):
    one_error_line(invoke("explain", "--plot", str(a_file / "x.png")), 1, "--plot", "is a file")
    one_error_line(invoke("explain", "--plot", str(tmp_path)), 1, "--plot", "is a folder")
    assert tree(tmp_path) == ["a-file"]


def test_explain_plot_read_only(read_only):
    result = invoke("explain", "--plot", str(read_only / "slopes.png"))
    one_error_line(result, 1, "--plot", "cannot write")


@pytest.mark.parametrize("error", [ENOSPC, KeyboardInterrupt()])
def test_explain_plot_full_disk_and_ctrl_c_leave_nothing(tmp_path, monkeypatch, error):
    from matplotlib.figure import Figure

    def fail(self, where, **options):
        Path(where).write_bytes(b"\x89PNG half")
        raise error

    monkeypatch.setattr(Figure, "savefig", fail)
    result = invoke("explain", "--plot", str(tmp_path / "figs" / "slopes.png"))
    if isinstance(error, KeyboardInterrupt):
        one_error_line(result, 130, "interrupted")
    else:
        one_error_line(result, 1, "slopes.png", "No space left on device")
    assert tree(tmp_path) == []


def test_explain_plot_writes_the_figure(tmp_path):
    result = invoke("explain", "--plot", str(tmp_path / "figs" / "slopes.svg"))
    assert result.exit_code == 0, result.output
    assert tree(tmp_path) == ["figs", "figs/slopes.svg"]
    assert (tmp_path / "figs" / "slopes.svg").read_text().lstrip().startswith("<?xml")


# estimators ---------------------------------------------------------------------------


def test_estimators_ctrl_c(monkeypatch):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("advbudget._estimators_page.estimators_markdown", interrupted)
    one_error_line(invoke("estimators", "--markdown"), 130, "interrupted")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [[], ["--markdown"]])
def test_estimators_to_a_full_disk(args):
    command = [sys.executable, "-c", "from advbudget.cli import main; main()", "estimators"]
    with open("/dev/full", "w") as full:
        process = subprocess.run(
            command + args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert process.returncode == 1, process.stderr
    assert process.stderr.strip().splitlines() == [
        "error: standard output: No space left on device"
    ]
