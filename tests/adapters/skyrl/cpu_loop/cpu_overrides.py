"""``python cpu_overrides.py CPU_DIR TOTAL_STEPS``: the SkyRL overrides of the CPU loop, one a
line, which ``CPU_LOOP=1 bash examples/skyrl_qwen3.sh`` puts after its own; writes the loop's
dataset, ``CPU_DIR/data/parity/<environment>/train.jsonl``.

Only what a CPU needs, and what makes the tiny run test something:

- the first 2 problems of the bundled DAPO sample, every step (``train_batch_size=2``): the
  prompt ledger sees them recur; their rows name the parity environment of
  ``skyrl_cpu_loop`` (a tiny random model fails every DAPO problem: no reward gaps), or with
  ``CPU_LOOP_ENV=advbudget_parity_turns`` its multi-turn form (for step-wise trajectories,
  with ``generator.step_wise_trajectories=true generator.max_turns=3`` given to the script);
- no colocation (it sleeps and offloads through CUDA), the policy and the reference on fake
  GPUs of their own (sharing one offloads the idle model, ``worker_dispatch.py:158``, whose
  ``worker.py:427`` divides by ``torch.cuda.device_count()``, 0 here);
- no flash-attention (``model_wrapper.py:154`` asserts it with microbatch padding removal);
- no vLLM metrics (``vllm_metrics_scraper.py:228`` scrapes Ray's Prometheus port), no GPU
  monitor, no dataloader processes, no evaluation or Hugging Face export (vLLM's side);
- lr 1e-3 (the tiny model moves), a checkpoint every step;
- ``epochs = TOTAL_STEPS + 1`` with SkyRL's ``max_training_steps`` (the script's
  ``TOTAL_STEPS``) ending the run: resumed at the end of an epoch, SkyRL restores the
  dataloader exhausted and spends the next epoch on nothing (``trainer.py:284,315,322``), so a
  resumed run needs one epoch more than its steps.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from advbudget.lab.data import load_problems, sample_path, write_skyrl

# skyrl_cpu_loop's environments (not imported: SkyRL takes 9 s): the one-turn parity
# environment, or with CPU_LOOP_ENV=advbudget_parity_turns its multi-turn form.
ENV_CLASSES = ("advbudget_parity", "advbudget_parity_turns")


def env_class() -> str:
    chosen = os.environ.get("CPU_LOOP_ENV", ENV_CLASSES[0])
    if chosen not in ENV_CLASSES:
        raise SystemExit(f"CPU_LOOP_ENV: expected one of {', '.join(ENV_CLASSES)}, got {chosen!r}")
    return chosen


def write_dataset(folder: Path, env: str) -> Path:
    (path,) = write_skyrl({"train": load_problems(sample_path("dapo"))[:2]}, folder / env)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({**row, "env_class": env}) + "\n" for row in rows))
    return path


def overrides(cpu_dir: Path, total_steps: int) -> list[str]:
    env = env_class()
    train = write_dataset(cpu_dir / "data" / "parity", env)
    return [
        f"data.train_data=['{train}']",
        "data.dataloader.num_workers=0",
        f"environment.env_class={env}",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        f"trainer.epochs={total_steps + 1}",
        "trainer.placement.colocate_all=false",
        "trainer.placement.colocate_policy_ref=false",
        "trainer.flash_attn=false",
        "trainer.remove_microbatch_padding=false",
        "trainer.enable_ray_gpu_monitor=false",
        "generator.inference_engine.enable_ray_prometheus_stats=false",
        "trainer.policy.optimizer_config.lr=1e-3",
        "trainer.ckpt_interval=1",
        "trainer.hf_save_interval=-1",
        "trainer.eval_interval=-1",
    ]


if __name__ == "__main__":
    print("\n".join(overrides(Path(sys.argv[1]).resolve(), int(sys.argv[2]))))
