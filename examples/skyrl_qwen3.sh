#!/usr/bin/env bash
# The paper's baselines on DAPO-Math-17K with SkyRL 0.4.0, with and without budgeting.
#
#   bash examples/skyrl_qwen3.sh                              # GRPO + budgeting on Qwen3-8B
#   BASELINE=grpo|dr_grpo|gspo|dapo|dapo_clipcov|dapo_klcov [BUDGET=0|1] bash examples/skyrl_qwen3.sh
#   MODEL=llama3.2-3b bash examples/skyrl_qwen3.sh            # Llama-3.2-3B-Instruct (pass@8)
#   ESTIMATOR=grpo BUDGET=0 bash examples/skyrl_qwen3.sh      # SkyRL's own estimator
#   bash examples/skyrl_qwen3.sh --print       # print the training command
#
# The protocol (examples/README.md, the same in the verl, TRL, OpenRLHF and tunix examples):
# 8 samples per prompt, 32 prompts per step (one optimizer step), 8192 response tokens, the
# chat template's default (Qwen3: thinking on), DAPO's ±1 reward (the advbudget_dapo
# environment of advbudget.adapters.skyrl.rewards), validation on 512 held-out DAPO problems
# every 50 steps, then `advbudget eval` (AMC23, AIME24, AIME25, MATH500; 8 samples at 0.7:
# avg@8 and pass@8) on the final model. SkyRL has verl's clip_cov and kl_cov policy losses,
# so all six baselines run; DAPO's overlong penalty is not in SkyRL 0.4.0 (it has overlong
# *filtering* only), so `dapo` runs without it.
#
# Budgeting replaces only how rewards become group advantages
# (trainer.algorithm.advantage_estimator=reward_budget, through `python -m
# advbudget.adapters.skyrl`, SkyRL's entry point with the estimators registered and the
# advbudget trainer's metrics, κ_eff and ledger); losses, KL and sampling stay SkyRL's. The
# baseline (BUDGET=0) runs our mirror of SkyRL's estimator (advbudget_grpo, advbudget_dr: the
# same advantages, tested) so that both runs log the same advbudget/* metrics and κ_eff
# (every KAPPA_EVERY steps). Logs: SkyRL's tracker (wandb when WANDB_API_KEY is set, else the
# console). vLLM colocated with the FSDP2 workers. Extra arguments (key=value) go to SkyRL
# last. The full run needs GPUs and has not been run by the advbudget tests.
#
# CPU mode (no GPU; what the advbudget tests run): CPU_LOOP=1 bash examples/skyrl_qwen3.sh
# runs this script's own overrides for TOTAL_STEPS=2 steps through SkyRL's real loop
# (validation, Ray, the registry sync, FSDP2 policy and reference workers over gloo, the
# skyrl-gym generator, weight sync, checkpoints) on a tiny random Qwen3 built locally
# (advbudget.lab.tiny) and the bundled DAPO sample, with the CPU harness of
# tests/adapters/skyrl/cpu_loop (CUDA calls patched, a vLLM stand-in that generates with
# transformers, fake GPUs for Ray). It overrides only what a CPU needs (see the harness):
# no colocation, no flash-attention, a local stand-in engine; 2 prompts per step; a toy
# environment with variance inside groups (a random model fails every DAPO problem); lr 1e-3;
# a checkpoint every step. It stops after training (the evaluation needs vLLM).
# Variables: CPU_DIR (model, data, checkpoints; default $HOME/data/advbudget/skyrl-cpu),
# TOTAL_STEPS, KAPPA_EVERY (default 1 here), BASELINE, BUDGET, ESTIMATOR as above.
#   CPU_LOOP=1 bash examples/skyrl_qwen3.sh               # 2 steps, 1-2 min on 2 cores
set -euo pipefail

MODE=train
ARGS=()
for arg in "$@"; do
  case "$arg" in
    --print) MODE=print ;;
    *) ARGS+=("$arg") ;;
  esac
done

PYTHON=${PYTHON:-python3}
CPU_LOOP=${CPU_LOOP:-0}
if [ "$CPU_LOOP" = 1 ]; then  # CPU mode's defaults (see the header)
  CPU_DIR=${CPU_DIR:-$HOME/data/advbudget/skyrl-cpu}
  : "${MODEL:=$CPU_DIR/tiny-qwen3}" "${DATA_DIR:=$CPU_DIR/data}" "${CKPT_DIR:=$CPU_DIR/run}"
  : "${NGPUS:=1}" "${VLLM_TP:=1}" "${MAX_RESPONSE:=16}" "${TOTAL_STEPS:=2}" "${KAPPA_EVERY:=1}"
fi
BASELINE=${BASELINE:-grpo}         # grpo | dr_grpo | gspo | dapo | dapo_clipcov | dapo_klcov
BUDGET=${BUDGET:-1}                # 1: reward budgeting; 0: the baseline's own advantages
BUDGET_TOTAL=${BUDGET_TOTAL:-1.0}
KAPPA_EVERY=${KAPPA_EVERY:-10}     # κ_eff every N steps (two extra policy forwards); 0: off
MODEL=${MODEL:-qwen3-8b}           # qwen3-8b | llama3.2-3b | a path or hub id
DATA_DIR=${DATA_DIR:-$HOME/data/advbudget}
NGPUS=${NGPUS:-8}
VLLM_TP=${VLLM_TP:-2}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
TOTAL_STEPS=${TOTAL_STEPS:-500}

# The paper's models, and what it reports for each.
case "$MODEL" in
  qwen3-8b) MODEL_PATH=Qwen/Qwen3-8B; MODEL_TAG=qwen3-8b; REPORT=avg@8 ;;
  llama3.2-3b) MODEL_PATH=meta-llama/Llama-3.2-3B-Instruct; MODEL_TAG=llama3.2-3b; REPORT=pass@8 ;;
  *) MODEL_PATH=$MODEL; MODEL_TAG=$(basename "$MODEL"); REPORT=avg@8 ;;
esac

# The baselines in SkyRL's terms (examples/README.md's table).
KL=(trainer.algorithm.use_kl_loss=false); LOSS=token_mean; CLIP=(0.2 0.2)
POLICY_LOSS=regular; NORM=true; BASE_ESTIMATOR=grpo; DAPO=()
case "$BASELINE" in
  grpo) LOSS=sequence_mean
    KL=(trainer.algorithm.use_kl_loss=true trainer.algorithm.kl_loss_coef=1e-3
        trainer.algorithm.kl_estimator_type=k3) ;;
  dr_grpo) BASE_ESTIMATOR=dr; NORM=false; LOSS=seq_mean_token_sum_norm
    DAPO=(trainer.algorithm.max_seq_len="$MAX_RESPONSE") ;;
  gspo) POLICY_LOSS=gspo; LOSS=sequence_mean; CLIP=(0.0003 0.0004) ;;
  dapo|dapo_clipcov|dapo_klcov) CLIP=(0.2 0.28)
    DAPO=(trainer.algorithm.dynamic_sampling.type=filter
          trainer.algorithm.dynamic_sampling.max_sample_batches=30)
    case "$BASELINE" in  # verl's defaults for its two covariance losses
      dapo_clipcov) POLICY_LOSS=clip_cov ;;
      dapo_klcov) POLICY_LOSS=kl_cov
        DAPO+=(trainer.algorithm.kl_cov.kl_cov_frac=0.0002 trainer.algorithm.kl_cov.ppo_kl_coef=0.1) ;;
    esac ;;
  *) echo "BASELINE: expected grpo, dr_grpo, gspo, dapo, dapo_clipcov or dapo_klcov," \
       "got '$BASELINE'" >&2; exit 2 ;;
esac
case "$BUDGET" in
  1) DEFAULT_ESTIMATOR=reward_budget ;;
  0) DEFAULT_ESTIMATOR="advbudget_$BASE_ESTIMATOR" ;;
  *) echo "BUDGET: expected 1 or 0, got '$BUDGET'" >&2; exit 2 ;;
esac
ESTIMATOR=${ESTIMATOR:-$DEFAULT_ESTIMATOR}
# The estimator's advbudget name in the run's name (as in the other examples).
case "$ESTIMATOR" in
  reward_budget) ESTIMATOR_TAG=budget
    [ "$BUDGET_TOTAL" = 1.0 ] || [ "$BUDGET_TOTAL" = 1 ] || ESTIMATOR_TAG=budget$BUDGET_TOTAL ;;
  advbudget_*) ESTIMATOR_TAG=${ESTIMATOR#advbudget_} ;;
  *) ESTIMATOR_TAG=$ESTIMATOR ;;
esac
# One folder per model, baseline and estimator: runs never overwrite each other.
RUN_NAME=${RUN_NAME:-${MODEL_TAG}_${BASELINE}_${ESTIMATOR_TAG}}
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/advbudget/skyrl/$RUN_NAME}
LOGGER=console
[ -n "${WANDB_API_KEY:-}" ] && LOGGER=wandb

OVERRIDES=(
  trainer.algorithm.advantage_estimator="$ESTIMATOR"
  trainer.algorithm.advbudget.budget="$BUDGET_TOTAL"
  trainer.algorithm.advbudget.kappa_every="$KAPPA_EVERY"
  trainer.algorithm.grpo_norm_by_std="$NORM"
  trainer.algorithm.loss_reduction="$LOSS"
  trainer.algorithm.policy_loss_type="$POLICY_LOSS"
  trainer.algorithm.eps_clip_low="${CLIP[0]}"
  trainer.algorithm.eps_clip_high="${CLIP[1]}"
  "${KL[@]}"
  trainer.algorithm.use_entropy_loss=false
  trainer.strategy=fsdp
  trainer.policy.model.path="$MODEL_PATH"
  trainer.placement.colocate_all=true
  trainer.placement.policy_num_gpus_per_node="$NGPUS"
  trainer.placement.ref_num_gpus_per_node="$NGPUS"
  generator.inference_engine.num_engines=$((NGPUS / VLLM_TP))
  generator.inference_engine.tensor_parallel_size="$VLLM_TP"
  data.train_data="['$DATA_DIR/dapo/skyrl/train.jsonl']"
  data.val_data="['$DATA_DIR/dapo/skyrl/val.jsonl']"
  environment.env_class=advbudget_dapo
  generator.n_samples_per_prompt=8
  trainer.train_batch_size=32
  trainer.policy_mini_batch_size=32
  trainer.max_training_steps="$TOTAL_STEPS"
  trainer.max_prompt_length=1024
  generator.sampling_params.max_generate_length="$MAX_RESPONSE"
  generator.sampling_params.temperature=1.0
  trainer.policy.optimizer_config.lr=1e-6
  trainer.eval_interval=50
  trainer.eval_before_train=false
  generator.eval_n_samples_per_prompt=8
  generator.eval_sampling_params.temperature=0.7
  generator.eval_sampling_params.max_generate_length="$MAX_RESPONSE"
  trainer.ckpt_interval=50
  trainer.ckpt_path="$CKPT_DIR/ckpt"
  trainer.hf_save_interval="$TOTAL_STEPS"
  trainer.export_path="$CKPT_DIR/export"
  trainer.logger="$LOGGER"
  trainer.project_name=advbudget
  trainer.run_name="$RUN_NAME"
  "${DAPO[@]+"${DAPO[@]}"}"
  "${ARGS[@]+"${ARGS[@]}"}"
)
ENTRY=(-m advbudget.adapters.skyrl)

if [ "$CPU_LOOP" = 1 ]; then
  # This script's overrides, then the CPU settings; the extra arguments (ARGS) stay last so
  # that they can override any of them.
  HARNESS=$(cd "$(dirname "$0")/.." && pwd)/tests/adapters/skyrl/cpu_loop
  OWN=("${OVERRIDES[@]:0:${#OVERRIDES[@]}-${#ARGS[@]}}")
  OVERRIDES=("${OWN[@]}" $("$PYTHON" "$HARNESS/cpu_overrides.py" "$CPU_DIR" "$TOTAL_STEPS")
    "${ARGS[@]+"${ARGS[@]}"}")
  ENTRY=(-m skyrl_cpu_loop)
  CPU_ENV=(PYTHONPATH="$HARNESS${PYTHONPATH:+:$PYTHONPATH}" RAY_DEDUP_LOGS=0)
  if [ "$MODE" = print ]; then
    printf '%q ' env "${CPU_ENV[@]}" "$PYTHON" "${ENTRY[@]}" "${OVERRIDES[@]}"
    echo; exit 0
  fi
  echo "CPU mode: model, data and checkpoints in $CPU_DIR" >&2
  [ -f "$MODEL_PATH/config.json" ] ||
    "$PYTHON" -c 'import sys; from advbudget.lab.tiny import build_tiny_model as b; b(sys.argv[1])' \
      "$MODEL_PATH"
  [ -f "$DATA_DIR/dapo/skyrl/val.jsonl" ] ||
    "$PYTHON" -c 'from advbudget.lab.cli import main; main()' data prepare --sample \
      --format skyrl --val-size 8 --output-dir "$DATA_DIR/dapo"
  exec env "${CPU_ENV[@]}" "$PYTHON" "${ENTRY[@]}" "${OVERRIDES[@]}"
fi

if [ "$MODE" = print ]; then
  printf '%q ' "$PYTHON" "${ENTRY[@]}" "${OVERRIDES[@]}"
  echo; exit 0
fi

# 1. Data: DAPO-Math-17K (deduplicated), 512 problems held out for validation, in SkyRL's
# JSON-lines layout (the same split as the other examples: the same seed).
[ -f "$DATA_DIR/dapo/skyrl/val.jsonl" ] ||
  advbudget data prepare --format skyrl --val-size 512 --output-dir "$DATA_DIR/dapo"

# 2. Train (SkyRL starts its own local Ray; on several nodes, `ray start` them first).
"$PYTHON" "${ENTRY[@]}" "${OVERRIDES[@]}"

# 3. Evaluate the final model as the paper does: avg@8 and pass@8.
advbudget eval --model "$CKPT_DIR/export/global_step_$TOTAL_STEPS/policy" \
  --benchmarks amc23,aime24,aime25,math500 --n 8 --k 8 \
  --temperature 0.7 --max-new-tokens "$MAX_RESPONSE" --backend vllm \
  --tensor-parallel-size "$VLLM_TP" --output-dir "$CKPT_DIR/eval"
echo "Scores in $CKPT_DIR/eval/scores.json (the paper reports $REPORT for $MODEL_TAG);" \
  "compare runs: advbudget compare $CKPT_DIR ..."
