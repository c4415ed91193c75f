#!/usr/bin/env bash
# Qwen3-8B on DAPO-Math-17K with verl 0.9.1: reward budgeting on top of a baseline recipe.
#
#   bash examples/verl_qwen3.sh                      # GRPO + budgeting (the paper's main run)
#   BASELINE=dr_grpo BUDGET=0 bash examples/verl_qwen3.sh   # plain Dr.GRPO
#   BASELINE=dapo|gspo [BUDGET=0|1] bash examples/verl_qwen3.sh
#   bash examples/verl_qwen3.sh --dry-run            # compose + validate the config, CPU only
#   bash examples/verl_qwen3.sh --print              # print the training command
#
# Budgeting replaces only the advantage step (algorithm.adv_estimator=reward_budget); each
# baseline keeps its own loss aggregation, clipping, KL and filtering (the paper's protocol: docs/reproducing.md).
# 8 rollouts per prompt, 32 prompts per update, vLLM rollout, validation on AIME24 (avg@8
# at temperature 0.7), metrics (advbudget/*, κ_eff) through trainer.v1.trainer_mode=advbudget_sync,
# then `advbudget eval` on the last checkpoint. Extra arguments are passed to verl as
# hydra overrides. Needs advbudget installed where verl runs (the verl.plugins entry point
# registers the estimators); VERL_USE_EXTERNAL_MODULES is set too, for older installs.
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
BASELINE=${BASELINE:-grpo}      # grpo | dr_grpo | dapo | gspo
BUDGET=${BUDGET:-1}             # 1: reward budgeting on top of the baseline; 0: the baseline
BUDGET_TOTAL=${BUDGET_TOTAL:-1.0}
KAPPA_EVERY=${KAPPA_EVERY:-10}  # κ_eff every N steps (one extra log-prob pass); 0: off
MODEL=${MODEL:-Qwen/Qwen3-8B}
DATA_DIR=${DATA_DIR:-$HOME/data/advbudget}
NGPUS=${NGPUS:-8}
NNODES=${NNODES:-1}
ROLLOUT_TP=${ROLLOUT_TP:-2}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
TOTAL_STEPS=${TOTAL_STEPS:-500}
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/advbudget/qwen3_8b_${BASELINE}_budget${BUDGET}}

# The baselines, as verl's recipes and the papers set them.
USE_KL=True; AGG=token-mean; CLIP_HIGH=0.2; LOSS_MODE=vanilla; NORM=True; REWARD_MANAGER=naive
EXTRA=()
case "$BASELINE" in
  grpo) ;;
  dr_grpo) NORM=False; AGG=seq-mean-token-sum-norm; USE_KL=False ;;
  dapo)
    USE_KL=False; CLIP_HIGH=0.28; REWARD_MANAGER=dapo
    EXTRA+=(algorithm.filter_groups.enable=True algorithm.filter_groups.metric=acc
            algorithm.filter_groups.max_num_gen_batches=10
            +reward.reward_kwargs.overlong_buffer_cfg.enable=True
            +reward.reward_kwargs.overlong_buffer_cfg.len=4096
            +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
            +reward.reward_kwargs.overlong_buffer_cfg.log=False
            +reward.reward_kwargs.max_resp_len="$MAX_RESPONSE") ;;
  gspo) USE_KL=False; LOSS_MODE=gspo; AGG=seq-mean-token-mean
        EXTRA+=(actor_rollout_ref.actor.clip_ratio_low=0.0003) ; CLIP_HIGH=0.0004 ;;
  *) echo "BASELINE: expected grpo, dr_grpo, dapo or gspo, got '$BASELINE'" >&2; exit 2 ;;
esac
if [ "$BUDGET" = 1 ]; then ESTIMATOR=reward_budget; else ESTIMATOR=grpo; fi
if [ "$BASELINE" != gspo ]; then EXTRA+=(actor_rollout_ref.actor.clip_ratio_low=0.2); fi

OVERRIDES=(
  algorithm.adv_estimator="$ESTIMATOR"
  algorithm.norm_adv_by_std_in_grpo="$NORM"
  +algorithm.advbudget.budget="$BUDGET_TOTAL"
  +algorithm.advbudget.kappa_every="$KAPPA_EVERY"
  algorithm.use_kl_in_reward=False
  data.train_files="$DATA_DIR/dapo/verl/train.parquet"
  data.val_files="$DATA_DIR/aime24/verl/train.parquet"
  data.prompt_key=prompt
  data.train_batch_size=32
  data.max_prompt_length=1024
  data.max_response_length="$MAX_RESPONSE"
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL"
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
  actor_rollout_ref.actor.clip_ratio_high="$CLIP_HIGH"
  actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS_MODE"
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n=8
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
  trainer.experiment_name="qwen3_8b_${BASELINE}_budget${BUDGET}"
  trainer.n_gpus_per_node="$NGPUS"
  trainer.nnodes="$NNODES"
  trainer.val_before_train=True
  trainer.test_freq=10
  trainer.save_freq=50
  trainer.total_training_steps="$TOTAL_STEPS"
  trainer.default_local_dir="$CKPT_DIR"
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=advbudget.adapters.verl
  "${EXTRA[@]}"
  "${ARGS[@]+"${ARGS[@]}"}"
)

case "$MODE" in
  dry-run) exec "$PYTHON" -m advbudget.adapters.verl.check_config "${OVERRIDES[@]}" ;;
  print) printf '%q ' "$PYTHON" -m verl.trainer.main_ppo "${OVERRIDES[@]}"; echo; exit 0 ;;
esac

# 1. Data: DAPO-Math-17K (deduplicated) and AIME24, in verl's parquet layout.
[ -f "$DATA_DIR/dapo/verl/train.parquet" ] ||
  advbudget data prepare --format verl --output-dir "$DATA_DIR/dapo"
[ -f "$DATA_DIR/aime24/verl/train.parquet" ] ||
  advbudget data prepare --format verl --source HuggingFaceH4/aime_2024 --no-shuffle \
    --output-dir "$DATA_DIR/aime24"

# 2. Train.
export VERL_USE_EXTERNAL_MODULES=advbudget.adapters.verl
"$PYTHON" -m verl.trainer.main_ppo "${OVERRIDES[@]}"

# 3. Evaluate the last checkpoint (merged to Hugging Face format) as the paper does: avg@8.
# (the step verl recorded in latest_checkpointed_iteration.txt, else the largest N)
STEP_DIR=$("$PYTHON" -m advbudget.adapters.verl.checkpoints "$CKPT_DIR")
"$PYTHON" -m verl.model_merger merge --backend fsdp --local_dir "$STEP_DIR/actor" \
  --target_dir "$STEP_DIR/hf"
advbudget eval --model "$STEP_DIR/hf" --benchmarks amc23,aime24,aime25,math500 --n 8 \
  --temperature 0.7 --max-new-tokens 8192 --backend vllm --tensor-parallel-size "$ROLLOUT_TP" \
  --output-dir "$CKPT_DIR/eval"
