#!/usr/bin/env bash
# The paper's baselines on DAPO-Math-17K with verl 0.9.1, with and without reward budgeting.
#
#   bash examples/verl_qwen3.sh                      # GRPO + budgeting on Qwen3-8B
#   BASELINE=dr_grpo BUDGET=0 bash examples/verl_qwen3.sh   # plain Dr.GRPO
#   BASELINE=grpo|dr_grpo|gspo|dapo|dapo_clipcov|dapo_klcov [BUDGET=0|1] bash examples/verl_qwen3.sh
#   MODEL=llama3.2-3b bash examples/verl_qwen3.sh    # Llama-3.2-3B-Instruct (the paper: pass@8)
#   bash examples/verl_qwen3.sh --dry-run            # compose + validate the config, CPU only
#   bash examples/verl_qwen3.sh --print              # print the training command
#
# The protocol (examples/README.md, the same in the TRL and OpenRLHF examples): 8 rollouts
# per prompt, 32 prompts per update, 8192 response tokens, the chat template's default
# (Qwen3: thinking on), DAPO's ±1 reward, validation on 512 held-out DAPO problems every 50
# steps, then `advbudget eval` (AMC23, AIME24, AIME25, MATH500; 8 samples at 0.7: avg@8 and
# pass@8) on the checkpoint verl finished with. Budgeting replaces only the advantage step
# (algorithm.adv_estimator=reward_budget); each baseline keeps its loss aggregation,
# clipping, KL and filtering. Metrics (advbudget/*, κ_eff) through
# trainer.v1.trainer_mode=advbudget_sync, logged to the console and wandb. Extra arguments
# are passed to verl as hydra overrides. Needs advbudget installed where verl runs (the
# verl.plugins entry point registers the estimators); VERL_USE_EXTERNAL_MODULES is set too.
#
# CPU mode (no GPU, no hub, minutes): CPU_LOOP=1 runs this script's own command line for
# TOTAL_STEPS=2 steps on a tiny random Qwen3 (advbudget.lab.tiny) and the bundled 16-problem
# DAPO sample, through verl's real loop (trainer, FSDP2 workers, reward loop, weight sync,
# checkpoints) with the CPU harness of tests/adapters/verl/cpu_loop (verlcpu: a cpu
# platform and an HF-generate rollout, "hfcpu", for verl 0.9.1). It adds only what a CPU
# needs, after the script's overrides (hydra keeps the last value): the harness's
# environment and overrides, 4 prompts x 4 rollouts, 16 response tokens, 256 prompt tokens,
# κ_eff every step (KAPPA_EVERY=1), no validation, the console and file loggers (VERL_FILE_LOGGER_PATH, default
# $CKPT_DIR/metrics.jsonl) and, with CPU_REWARD=parity (the default), a reward with
# variance inside groups (a random model scores -1 on every DAPO problem: every group
# would be skipped and κ_eff would have no pairs; CPU_REWARD=dapo keeps DAPO's). It stops
# after training: the evaluation step needs vLLM. Extra arguments still come last.
#   CPU_LOOP=1 bash examples/verl_qwen3.sh                 # 2 steps, 1-2 min on 2 cores
#   CPU_LOOP=1 CPU_DIR=/tmp/x NGPUS=2 bash examples/verl_qwen3.sh  # 2 FSDP ranks (gloo)
set -euo pipefail

MODE=train
ARGS=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) MODE=dry-run ;;
    --print) MODE=print ;;
    *) ARGS+=("$arg") ;;
  esac
done

PYTHON=${PYTHON:-python3}
CPU_LOOP=${CPU_LOOP:-0}         # 1: the CPU mode above
if [ "$CPU_LOOP" = 1 ]; then
  CPU_DIR=${CPU_DIR:-$HOME/data/advbudget/verl-cpu}   # tiny model, sample data, checkpoints
  DATA_DIR=${DATA_DIR:-$CPU_DIR}
  MODEL=${MODEL:-$CPU_DIR/tiny-qwen3}
  NGPUS=${NGPUS:-1}
  ROLLOUT_TP=1
  MAX_RESPONSE=${MAX_RESPONSE:-16}
  TOTAL_STEPS=${TOTAL_STEPS:-2}
  CPU_REWARD=${CPU_REWARD:-parity}  # parity | dapo
  KAPPA_EVERY=${KAPPA_EVERY:-1}
  HARNESS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/adapters/verl/cpu_loop" && pwd)
fi
BASELINE=${BASELINE:-grpo}      # grpo | dr_grpo | gspo | dapo | dapo_clipcov | dapo_klcov
BUDGET=${BUDGET:-1}             # 1: reward budgeting on top of the baseline; 0: the baseline
BUDGET_TOTAL=${BUDGET_TOTAL:-1.0}
KAPPA_EVERY=${KAPPA_EVERY:-10}  # κ_eff every N steps (one extra log-prob pass); 0: off
MODEL=${MODEL:-qwen3-8b}        # qwen3-8b | llama3.2-3b | a path or hub id
DATA_DIR=${DATA_DIR:-$HOME/data/advbudget}
NGPUS=${NGPUS:-8}
NNODES=${NNODES:-1}
ROLLOUT_TP=${ROLLOUT_TP:-2}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
TOTAL_STEPS=${TOTAL_STEPS:-500}

# The paper's models, and what it reports for each.
case "$MODEL" in
  qwen3-8b) MODEL_PATH=Qwen/Qwen3-8B; MODEL_TAG=qwen3-8b; REPORT=avg@8 ;;
  llama3.2-3b) MODEL_PATH=meta-llama/Llama-3.2-3B-Instruct; MODEL_TAG=llama3.2-3b; REPORT=pass@8 ;;
  *) MODEL_PATH=$MODEL; MODEL_TAG=$(basename "$MODEL"); REPORT=avg@8 ;;
esac

# The baselines, as verl's recipes and the papers set them.
USE_KL=False; AGG=token-mean; CLIP_LOW=0.2; CLIP_HIGH=0.2; LOSS_MODE=vanilla; NORM=True
REWARD_MANAGER=naive
EXTRA=()
DAPO=(algorithm.filter_groups.enable=True algorithm.filter_groups.metric=acc
      algorithm.filter_groups.max_num_gen_batches=10
      +reward.reward_kwargs.overlong_buffer_cfg.enable=True
      +reward.reward_kwargs.overlong_buffer_cfg.len=4096
      +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
      +reward.reward_kwargs.overlong_buffer_cfg.log=False
      +reward.reward_kwargs.max_resp_len="$MAX_RESPONSE")
case "$BASELINE" in
  grpo) USE_KL=True; AGG=seq-mean-token-mean ;;
  dr_grpo) NORM=False; AGG=seq-mean-token-sum-norm ;;
  gspo) LOSS_MODE=gspo; AGG=seq-mean-token-mean; CLIP_LOW=0.0003; CLIP_HIGH=0.0004 ;;
  dapo|dapo_clipcov|dapo_klcov)
    CLIP_HIGH=0.28; REWARD_MANAGER=dapo; EXTRA+=("${DAPO[@]}")
    # ClipCov / KLCov (verl's clip_cov and kl_cov policy losses, verl's default ratios).
    case "$BASELINE" in
      dapo_clipcov) LOSS_MODE=clip_cov
        EXTRA+=(actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.0002
                actor_rollout_ref.actor.policy_loss.clip_cov_lb=1.0
                actor_rollout_ref.actor.policy_loss.clip_cov_ub=5.0) ;;
      dapo_klcov) LOSS_MODE=kl_cov
        EXTRA+=(actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.0002
                actor_rollout_ref.actor.policy_loss.ppo_kl_coef=0.1) ;;
    esac ;;
  *) echo "BASELINE: expected grpo, dr_grpo, gspo, dapo, dapo_clipcov or dapo_klcov, got '$BASELINE'" >&2
     exit 2 ;;
esac
case "$BUDGET" in
  1) ESTIMATOR=reward_budget; ESTIMATOR_TAG=budget
     [ "$BUDGET_TOTAL" = 1.0 ] || [ "$BUDGET_TOTAL" = 1 ] || ESTIMATOR_TAG=budget$BUDGET_TOTAL ;;
  0) ESTIMATOR=grpo; ESTIMATOR_TAG=grpo; [ "$NORM" = True ] || ESTIMATOR_TAG=dr ;;
  *) echo "BUDGET: expected 1 or 0, got '$BUDGET'" >&2; exit 2 ;;
esac
# One folder per model, baseline and estimator: runs never overwrite each other.
RUN_NAME=${RUN_NAME:-${MODEL_TAG}_${BASELINE}_${ESTIMATOR_TAG}}
[ "$CPU_LOOP" != 1 ] || CKPT_DIR=${CKPT_DIR:-$CPU_DIR/checkpoints/$RUN_NAME}
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/advbudget/verl/$RUN_NAME}

OVERRIDES=(
  algorithm.adv_estimator="$ESTIMATOR"
  algorithm.norm_adv_by_std_in_grpo="$NORM"
  +algorithm.advbudget.budget="$BUDGET_TOTAL"
  +algorithm.advbudget.kappa_every="$KAPPA_EVERY"
  algorithm.use_kl_in_reward=False
  data.train_files="$DATA_DIR/dapo/verl/train.parquet"
  data.val_files="$DATA_DIR/dapo/verl/val.parquet"
  data.prompt_key=prompt
  data.train_batch_size=32
  data.max_prompt_length=1024
  data.max_response_length="$MAX_RESPONSE"
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=32
  actor_rollout_ref.actor.use_dynamic_bsz=True
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * (1024 + MAX_RESPONSE)))
  actor_rollout_ref.actor.use_kl_loss="$USE_KL"
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.loss_agg_mode="$AGG"
  actor_rollout_ref.actor.clip_ratio_low="$CLIP_LOW"
  actor_rollout_ref.actor.clip_ratio_high="$CLIP_HIGH"
  actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS_MODE"
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n=8
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
  actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$((4 * (1024 + MAX_RESPONSE)))
  actor_rollout_ref.rollout.val_kwargs.n=8
  actor_rollout_ref.rollout.val_kwargs.temperature=0.7
  actor_rollout_ref.rollout.val_kwargs.do_sample=True
  actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
  actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$((4 * (1024 + MAX_RESPONSE)))
  reward.reward_manager.name="$REWARD_MANAGER"
  trainer.use_v1=True
  trainer.v1.trainer_mode=advbudget_sync
  trainer.logger='["console","wandb"]'
  trainer.project_name=advbudget
  trainer.experiment_name="$RUN_NAME"
  trainer.n_gpus_per_node="$NGPUS"
  trainer.nnodes="$NNODES"
  trainer.val_before_train=True
  trainer.test_freq=50
  trainer.save_freq=50
  trainer.total_training_steps="$TOTAL_STEPS"
  trainer.default_local_dir="$CKPT_DIR"
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=advbudget.adapters.verl
  "${EXTRA[@]}"
)
if [ "$CPU_LOOP" = 1 ]; then
  export VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics.jsonl}
  while IFS= read -r line; do export "${line?}"; done \
    < <(PYTHONPATH="$HARNESS${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m verlcpu env)
  mapfile -t CPU_OVERRIDES < <("$PYTHON" -m verlcpu overrides "$NGPUS")
  OVERRIDES+=(
    "${CPU_OVERRIDES[@]}"
    data.train_batch_size=4
    data.max_prompt_length=256
    actor_rollout_ref.actor.ppo_mini_batch_size=4
    actor_rollout_ref.rollout.n=4
    trainer.logger='["console","file"]'
    trainer.val_before_train=False
    trainer.test_freq=-1
  )
  [ "$CPU_REWARD" = dapo ] ||
    OVERRIDES+=(reward.custom_reward_function.path="$HARNESS/verlcpu/reward.py"
                reward.custom_reward_function.name=compute_score)
fi
OVERRIDES+=("${ARGS[@]+"${ARGS[@]}"}")

case "$MODE" in
  dry-run) exec "$PYTHON" -m advbudget.adapters.verl.check_config "${OVERRIDES[@]}" ;;
  print) printf '%q ' "$PYTHON" -m verl.trainer.main_ppo "${OVERRIDES[@]}"; echo; exit 0 ;;
esac

# 1. Data: DAPO-Math-17K (deduplicated), 512 problems held out for validation, in verl's
# parquet layout (the same split as the TRL and OpenRLHF examples: the same seed).
# CPU mode: 16 problems of the bundled sample (4 for validation) and the tiny model.
if [ "$CPU_LOOP" = 1 ]; then
  [ -f "$DATA_DIR/dapo/verl/val.parquet" ] ||
    advbudget data prepare --sample --format verl --max-samples 16 --val-size 4 \
      --output-dir "$DATA_DIR/dapo"
  [ -f "$MODEL_PATH/config.json" ] || "$PYTHON" -c \
    'import sys; from advbudget.lab.tiny import build_tiny_model as b; b(sys.argv[1], hidden_size=64)' \
    "$MODEL_PATH"
  mkdir -p "$(dirname "$VERL_FILE_LOGGER_PATH")"
fi
[ -f "$DATA_DIR/dapo/verl/val.parquet" ] ||
  advbudget data prepare --format verl --val-size 512 --output-dir "$DATA_DIR/dapo"

# 2. Train.
[ "$CPU_LOOP" = 1 ] || export VERL_USE_EXTERNAL_MODULES=advbudget.adapters.verl  # CPU: verlcpu's
"$PYTHON" -m verl.trainer.main_ppo "${OVERRIDES[@]}"
if [ "$CPU_LOOP" = 1 ]; then
  echo "CPU mode: trained; checkpoints in $CKPT_DIR, metrics in $VERL_FILE_LOGGER_PATH" \
    "(no evaluation: it needs vLLM)."
  exit 0
fi

# 3. Evaluate the checkpoint verl finished with (latest_checkpointed_iteration.txt, else
# the largest N), merged to Hugging Face format, as the paper does: avg@8 and pass@8.
STEP_DIR=$("$PYTHON" -m advbudget.adapters.verl.checkpoints "$CKPT_DIR")
"$PYTHON" -m verl.model_merger merge --backend fsdp --local_dir "$STEP_DIR/actor" \
  --target_dir "$STEP_DIR/hf"
advbudget eval --model "$STEP_DIR/hf" --benchmarks amc23,aime24,aime25,math500 --n 8 --k 8 \
  --temperature 0.7 --max-new-tokens "$MAX_RESPONSE" --backend vllm \
  --tensor-parallel-size "$ROLLOUT_TP" --output-dir "$CKPT_DIR/eval"
echo "Scores in $CKPT_DIR/eval/scores.json (the paper reports $REPORT for $MODEL_TAG);" \
  "compare runs: advbudget compare $CKPT_DIR ..."
