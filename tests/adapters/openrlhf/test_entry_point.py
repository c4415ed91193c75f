"""``python -m advbudget.adapters.openrlhf``: OpenRLHF's real parser and checks, our names
and preconditions, parse-only mode."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("openrlhf")

from advbudget.adapters.openrlhf import HOOK
from advbudget.adapters.openrlhf.__main__ import main, runtime_env

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

BASE = ["--advbudget.parse_only", "--actor.model_name_or_path", "Qwen/Qwen3-8B"]


def parse(*flags: str):  # type: ignore[no-untyped-def]
    return main([*BASE, *flags])


def test_accepts_reward_budget_and_budget() -> None:
    args = parse(
        "--algo.advantage.estimator", "reward_budget",
        "--rollout.n_samples_per_prompt", "8",
        "--advbudget.budget", "0.5",
    )  # fmt: skip
    assert args.algo.advantage.estimator == "reward_budget"
    assert args.advbudget.budget == 0.5
    assert args.rollout.n_samples_per_prompt == 8
    assert args.critic.model_name_or_path is None  # OpenRLHF's own post-parse logic ran


@pytest.mark.parametrize("name", ["advbudget_group_norm", "advbudget_dr_grpo", "advbudget_rloo"])
def test_accepts_our_other_names(name: str) -> None:
    args = parse("--algo.advantage.estimator", name, "--rollout.n_samples_per_prompt", "4")
    assert args.advbudget.budget is None  # unset: the estimator's own default


def test_openrlhf_names_and_checks_unchanged() -> None:
    args = parse("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "8")
    assert args.algo.advantage.estimator == "group_norm"
    with pytest.raises(AssertionError, match="n_samples_per_prompt > 1"):
        parse("--algo.advantage.estimator", "group_norm")


def test_rejects_single_sample() -> None:
    with pytest.raises(SystemExit, match=r"n_samples_per_prompt > 1 \(got 1\)"):
        parse("--algo.advantage.estimator", "reward_budget")


def test_rejects_critic() -> None:
    with pytest.raises(SystemExit, match="uses no critic"):
        parse(
            "--algo.advantage.estimator", "reward_budget",
            "--rollout.n_samples_per_prompt", "8",
            "--critic.model_name_or_path", "x",
        )  # fmt: skip


def test_kappa_every_flag() -> None:
    flags = ["--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8"]
    assert parse(*flags).advbudget.kappa_every == 10
    assert parse(*flags, "--advbudget.kappa_every", "0").advbudget.kappa_every == 0
    with pytest.raises(SystemExit, match="kappa_every must be >= 0, got -1"):
        parse(*flags, "--advbudget.kappa_every", "-1")


def test_solved_reward_flag() -> None:
    """``--advbudget.solved_reward``: a number, ``none`` to turn the split off (default 1.0
    in the trainer when not given); anything else is one line naming the flag."""
    from advbudget.adapters.openrlhf._options import read_options

    flags = ["--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8"]
    assert parse(*flags).advbudget.solved_reward is None
    assert read_options(parse(*flags)).solved_reward == 1.0
    assert parse(*flags, "--advbudget.solved_reward", "0.5").advbudget.solved_reward == 0.5
    off = parse(*flags, "--advbudget.solved_reward", "None")
    assert read_options(off).solved_reward is None
    for bad in ("high", "nan", "inf"):
        with pytest.raises(SystemExit) as info:
            parse(*flags, "--advbudget.solved_reward", bad)
        message = str(info.value.code)
        assert message.startswith(
            "advbudget: --advbudget.solved_reward: expected a finite number or none (off), got "
        ), message
        assert "\n" not in message


def test_rejects_bad_budget() -> None:
    with pytest.raises(SystemExit, match=r"budget: expected a positive finite number, got 0\.0"):
        parse(
            "--algo.advantage.estimator", "reward_budget",
            "--rollout.n_samples_per_prompt", "8",
            "--advbudget.budget", "0",
        )  # fmt: skip


def test_rho_kl_flag() -> None:
    """--advbudget.rho takes a number or kl (spo's KL-adaptive forgetting), and kl is
    refused with an estimator that has no rho, before anything starts."""
    spo = ("--algo.advantage.estimator", "advbudget_spo", "--rollout.n_samples_per_prompt", "8")
    assert parse(*spo, "--advbudget.rho", "KL").advbudget.rho == "kl"
    assert parse(*spo, "--advbudget.rho", "0.9").advbudget.rho == 0.9
    with pytest.raises(SystemExit, match=r"^advbudget: --advbudget\.rho: 'kl' is spo's"):
        parse(
            "--algo.advantage.estimator", "advbudget_rae", "--rollout.n_samples_per_prompt", "8",
            "--advbudget.rho", "kl",
        )  # fmt: skip
    with pytest.raises(SystemExit, match=r"^advbudget: --advbudget\.rho: expected a number in"):
        parse(*spo, "--advbudget.rho", "1.5")
    with pytest.raises(
        SystemExit, match=r"^advbudget: --advbudget\.rho: .*openrlhf's own estimator takes no rho"
    ):
        parse(
            "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "8",
            "--advbudget.rho", "kl",
        )  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [
        ["--algo.advantage.estimator", "nope", "--rollout.n_samples_per_prompt", "8"],
        ["--advbudget.rho", "fast"],
        ["--advantage_estimator", "reward_budget"],  # flat flags: gone since 0.10.2
    ],
)
def test_argparse_errors(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*flags)
    assert info.value.code == 2


def test_parser_restored() -> None:
    parse("--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8")
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo.advantage.estimator", choices=["gae"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--algo.advantage.estimator", "reward_budget"])


def test_module_runs_as_a_script() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "advbudget.adapters.openrlhf", *BASE,
         "--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8"],
        capture_output=True, text=True, env=dict(os.environ), timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "flags parse; estimator reward_budget" in out.stdout


def test_runtime_env_outside_a_job() -> None:
    env = runtime_env({})
    assert env["worker_process_setup_hook"] == HOOK
    assert env["env_vars"]["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] == "1"


def test_runtime_env_leaves_out_what_the_job_sets() -> None:
    """Ray refuses a runtime-env field or env var set by both the job and ``ray.init``."""
    job = {
        "worker_process_setup_hook": HOOK,
        "env_vars": {"NCCL_DEBUG": "INFO", "PYTHONPATH": "/x"},
    }
    env = runtime_env(job)
    assert "worker_process_setup_hook" not in env
    assert "NCCL_DEBUG" not in env["env_vars"]
    assert set(env["env_vars"]) == {"TOKENIZERS_PARALLELISM", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"}


def test_runtime_env_rejects_another_hook() -> None:
    with pytest.raises(SystemExit, match=r"worker_process_setup_hook='my\.hook'"):
        runtime_env({"worker_process_setup_hook": "my.hook"})


PROBE = """
import advbudget.adapters.openrlhf.__main__ as entry
import ray

entry.init_ray()  # what `python -m advbudget.adapters.openrlhf` does before training


@ray.remote
class Probe:
    def installed(self):
        import advbudget.adapters.openrlhf as adapter

        return adapter.is_installed()


print("PATCHED_IN_ACTOR", ray.get(Probe.remote().installed.remote(), timeout=120))
"""


# Every port `ray start --head` opens, each given a free one: at Ray's defaults a second
# Ray on the machine (a user's, another suite's) can hold them, and the head's dashboard
# agent then never registers ("No available agent to submit job").
RAY_PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
    "--node-manager-port",
    "--object-manager-port",
    "--ray-client-server-port",
)


def _free_ports(count: int) -> list[int]:
    """Ports no process listens on now (the OS picks them; all held until all are known)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class RayHead:
    ray_bin: str
    address: str  # the job server (dashboard)
    temp_dir: Path  # this cluster's sessions and logs, nobody else's

    def agent_log(self, lines: int = 40) -> str:
        """The tail of the head's dashboard agent log: why it did not register."""
        logs = sorted((self.temp_dir / "session_latest" / "logs").glob("dashboard_agent*"))
        if not logs:
            return f"no dashboard agent log under {self.temp_dir}"
        text = logs[-1].read_text(errors="replace").splitlines()[-lines:]
        return f"--- {logs[-1].name} ---\n" + "\n".join(text)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A one-node Ray cluster with the job server (``ray start --head --block``) on free
    ports and its own temp dir; stopped after by ending its process group, so that no
    other Ray on the machine is touched (``ray stop`` would stop every one)."""
    pytest.importorskip("ray.dashboard")
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    ports = dict(zip(RAY_PORT_FLAGS, _free_ports(len(RAY_PORT_FLAGS)), strict=True))
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # sockets: paths < 108 chars
    command = [ray_bin, "start", "--head", "--block", "--num-cpus", "1",
               "--disable-usage-stats", "--temp-dir", str(temp_dir),
               *(str(item) for pair in ports.items() for item in pair)]  # fmt: skip
    log = temp_dir / "ray-start.log"
    with open(log, "w") as out:
        head = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start failed: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        address = f"http://127.0.0.1:{ports['--dashboard-port']}"
        yield RayHead(ray_bin, address, temp_dir), tmp_path_factory.mktemp("job")
    finally:
        head.terminate()  # ray start --block stops the processes it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # what is left of its process group
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.parametrize("hook_in_job", [True, False])
def test_ray_job_submit(ray_cluster, hook_in_job: bool) -> None:  # type: ignore[no-untyped-def]
    """Under ``ray job submit`` the entry point's ``ray.init`` joins the job's runtime env
    (with or without the hook in ``--runtime-env-json``) and the actors are patched."""
    head, workdir = ray_cluster
    (workdir / "probe.py").write_text(PROBE)
    job_env: dict = {"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}}
    if hook_in_job:
        job_env["worker_process_setup_hook"] = HOOK
    command = [
        head.ray_bin, "job", "submit", "--address", head.address, "--working-dir", str(workdir),
        "--runtime-env-json", json.dumps(job_env), "--", sys.executable, "probe.py",
    ]  # fmt: skip
    # The head's dashboard agent registers some seconds after `ray start` returns (longer
    # on a loaded machine); until then the job server answers "No available agent".
    deadline = time.monotonic() + 120
    while True:
        out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if "No available agent" not in out.stderr:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"the head's dashboard agent never registered (120 s)\n{head.agent_log()}")
        time.sleep(3)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "PATCHED_IN_ACTOR True" in out.stdout


def _docs_flags() -> list[str]:
    """The data flags the OpenRLHF guide tells users to pass (its first bash block with
    --data.prompt_dataset)."""
    import re
    import shlex
    from pathlib import Path

    guide = Path(__file__).resolve().parents[3] / "docs" / "guides" / "openrlhf.md"
    blocks = re.findall(r"```bash\n(.*?)```", guide.read_text(encoding="utf-8"), re.S)
    block = next(b for b in blocks if "--data.prompt_dataset" in b)
    return shlex.split(block.replace("\\\n", " "))


@pytest.mark.parametrize("source", ["data prepare", "docs"])
def test_printed_data_flags_parse_with_openrlhf(source: str) -> None:
    """What `advbudget data prepare` prints for OpenRLHF, and what the guide shows, parse
    with OpenRLHF's own parser (0.11.2 has --eval.dataset, not --data.eval_dataset)."""
    import shlex

    from advbudget.lab.cli._data import _usage

    if source == "docs":
        flags = _docs_flags()
    else:
        files = {"train": "/data/train.jsonl", "val": "/data/val.jsonl"}
        flags = shlex.split(_usage("openrlhf", files))
    import advbudget.adapters.openrlhf.rewards as reward_file

    args = parse(
        "--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8",
        "--reward.remote_url", reward_file.__file__,  # OpenRLHF's eval needs a reward
        *flags,
    )  # fmt: skip
    assert args.data.prompt_dataset.endswith("train.jsonl")
    assert args.eval.dataset.endswith("val.jsonl")
    assert args.data.label_key == "label"


def test_refuses_an_estimator_of_reward_components() -> None:
    # OpenRLHF's experiences carry one reward per sample: gdpo has nothing to normalise.
    with pytest.raises(SystemExit) as info:
        parse(
            "--algo.advantage.estimator", "advbudget_gdpo",
            "--rollout.n_samples_per_prompt", "8",
        )  # fmt: skip
    assert str(info.value.code) == (
        "advbudget: --algo.advantage.estimator: advbudget_gdpo takes reward components "
        "(several rewards per rollout), which openrlhf does not keep: it gives each rollout "
        "one reward"
    )
