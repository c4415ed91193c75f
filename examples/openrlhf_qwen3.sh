#!/usr/bin/env bash
# The paper's baselines on DAPO-Math-17K with OpenRLHF 0.11.2, with and without budgeting.
#
#   bash examples/openrlhf_qwen3.sh                           # GRPO + budgeting on Qwen3-8B
#   BASELINE=grpo|dr_grpo|gspo|dapo [BUDGET=0|1] bash examples/openrlhf_qwen3.sh
#   MODEL=llama3.2-3b bash examples/openrlhf_qwen3.sh         # Llama-3.2-3B-Instruct (pass@8)
#   ESTIMATOR=group_norm BUDGET=0 bash examples/openrlhf_qwen3.sh  # OpenRLHF's own code path
#   bash examples/openrlhf_qwen3.sh --parse-only   # every flag through OpenRLHF's parser (CPU)
#   bash examples/openrlhf_qwen3.sh --print        # print the training command
#
# The protocol (examples/README.md, the same in the verl and TRL examples): 8 samples per
# prompt, 32 prompts per rollout batch, 8192 response tokens, the chat template's default
# (Qwen3: thinking on; OpenRLHF cannot pass enable_thinking), DAPO's ±1 reward, validation
# on 512 held-out DAPO problems every 50 steps, then `advbudget eval` (AMC23, AIME24, AIME25,
# MATH500; 8 samples at 0.7: avg@8 and pass@8) on the final model. DAPO + ClipCov / KLCov
# are verl policy losses that OpenRLHF does not have (examples/verl_qwen3.sh runs them).
#
# Budgeting replaces only how rewards become group advantages (--algo.advantage.estimator
# reward_budget, through `python -m advbudget.adapters.openrlhf`, which patches OpenRLHF's
# trainer inside the PPOTrainer Ray actor via Ray's worker_process_setup_hook); KL,
# clipping, length penalties and returns stay OpenRLHF's. The baseline (BUDGET=0) runs our
# mirror of OpenRLHF's estimator (advbudget_group_norm / advbudget_dr_grpo: the same
# advantages, tested) so that both runs log the same train/advbudget_* metrics and κ_eff
# (every KAPPA_EVERY steps). Logs: TensorBoard in $CKPT_DIR/tensorboard, and wandb when
# WANDB_API_KEY is set. vLLM hybrid engine (colocated, sleep mode), Ray job submit. Extra
# arguments go to OpenRLHF. Every flag parses with OpenRLHF 0.11.2's parser (tested on a
# CPU without vLLM); the full run needs GPUs and has not been run by the advbudget tests.
#
# CPU mode (no GPU; what the advbudget tests run): CPU_LOOP=1 bash examples/openrlhf_qwen3.sh
# runs this script's own flags for TOTAL_STEPS=2 steps through OpenRLHF's real loop
# (PPOTrainer, DeepSpeed ZeRO-3 actor and reference, RolloutRayActor, weight sync,
# checkpoints) on a tiny random Qwen3 built locally (advbudget.lab.tiny) and the bundled
# 64-problem sample (advbudget data prepare --sample), with the CPU harness of
# tests/adapters/openrlhf/cpu_loop on PYTHONPATH (CUDA calls patched, a vLLM stand-in that
# generates with transformers, fake GPUs for Ray). It overrides only what a CPU needs: a
# local Ray instead of `ray job submit`; one engine, --vllm.sync_backend gloo, sdpa; no
# packing, colocation or sleep modes; no TensorBoard (not installed by `make test`); 2
# prompts per step; a reward file with variance inside groups (cpu_loop/parity_reward.py:
# a random model fails every problem); lr 1e-3 without warm-up (a step of 1e-6, or the
# warm-up's first step at lr 0, leaves bf16 weights unchanged); a checkpoint every
# TOTAL_STEPS steps. It stops after training (the evaluation needs vLLM).
# Variables: CPU_DIR (model, data, checkpoints; default $HOME/data/advbudget/openrlhf-cpu),
# TOTAL_STEPS, NGPUS (data-parallel ranks of the actor and the reference, default 1),
# KAPPA_EVERY (default 1 here: κ_eff every step), BASELINE, BUDGET, ESTIMATOR as above; extra arguments go to OpenRLHF last.
#   CPU_LOOP=1 bash examples/openrlhf_qwen3.sh            # 2 steps, 1-2 min on 2 cores
#   CPU_LOOP=1 NGPUS=2 bash examples/openrlhf_qwen3.sh    # 2 DeepSpeed ranks (gloo)
set -euo pipefail

MODE=train
ARGS=()
for arg in "$@"; do
  case "$arg" in
    --parse-only) MODE=parse-only ;;
    --print) MODE=print ;;
    *) ARGS+=("$arg") ;;
  esac
done

PYTHON=${PYTHON:-python3}
CPU_LOOP=${CPU_LOOP:-0}
if [ "$CPU_LOOP" = 1 ]; then  # CPU mode's defaults (see the header)
  CPU_DIR=${CPU_DIR:-$HOME/data/advbudget/openrlhf-cpu}
  : "${MODEL:=$CPU_DIR/tiny-qwen3}" "${DATA_DIR:=$CPU_DIR/data}" "${CKPT_DIR:=$CPU_DIR/run}"
  : "${NGPUS:=1}" "${VLLM_TP:=1}" "${MAX_RESPONSE:=16}" "${TOTAL_STEPS:=2}" "${KAPPA_EVERY:=1}"
fi
BASELINE=${BASELINE:-grpo}         # grpo (OpenRLHF's group_norm) | dr_grpo | gspo | dapo
BUDGET=${BUDGET:-1}                # 1: reward budgeting; 0: the baseline's own advantages
BUDGET_TOTAL=${BUDGET_TOTAL:-1.0}
KAPPA_EVERY=${KAPPA_EVERY:-10}     # κ_eff every N steps (one extra actor forward); 0: off
MODEL=${MODEL:-qwen3-8b}           # qwen3-8b | llama3.2-3b | a path or hub id
DATA_DIR=${DATA_DIR:-$HOME/data/advbudget}
NGPUS=${NGPUS:-8}
NNODES=${NNODES:-1}
VLLM_TP=${VLLM_TP:-2}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
TOTAL_STEPS=${TOTAL_STEPS:-500}
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
HOOK=advbudget.adapters.openrlhf.install
REWARD_FILE=$("$PYTHON" -c 'import advbudget.adapters.openrlhf.rewards as m; print(m.__file__)' 2>/dev/null ||
  echo "$(cd "$(dirname "$0")/.." && pwd)/advbudget/adapters/openrlhf/rewards.py")

# The paper's models, and what it reports for each.
case "$MODEL" in
  qwen3-8b) MODEL_PATH=Qwen/Qwen3-8B; MODEL_TAG=qwen3-8b; REPORT=avg@8 ;;
  llama3.2-3b) MODEL_PATH=meta-llama/Llama-3.2-3B-Instruct; MODEL_TAG=llama3.2-3b; REPORT=pass@8 ;;
  *) MODEL_PATH=$MODEL; MODEL_TAG=$(basename "$MODEL"); REPORT=avg@8 ;;
esac

# The baselines in OpenRLHF's terms (no KL unless set; OpenRLHF has no Dr.GRPO loss
# aggregation, so Dr.GRPO keeps token-mean and only its advantages change).
KL=(--algo.kl.init_coef 0); AGG=token-mean; CLIP=(0.2 0.2); POLICY_LOSS=ppo; DAPO=()
case "$BASELINE" in
  grpo|group_norm) BASELINE=grpo; BASE_ESTIMATOR=group_norm; AGG=seq-mean-token-mean
    KL=(--algo.kl.use_loss --algo.kl.init_coef 1e-3 --algo.kl.estimator k3) ;;
  dr_grpo) BASE_ESTIMATOR=dr_grpo ;;
  gspo) BASE_ESTIMATOR=group_norm; POLICY_LOSS=gspo; AGG=seq-mean-token-mean; CLIP=(0.0003 0.0004) ;;
  dapo) BASE_ESTIMATOR=group_norm; CLIP=(0.2 0.28)
    DAPO=(--algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1
          --reward.overlong_buffer_len 4096 --reward.overlong_penalty_factor 1.0) ;;
  dapo_clipcov|dapo_klcov)
    echo "BASELINE: $BASELINE needs verl's ${BASELINE#dapo_} policy loss, which OpenRLHF does" \
      "not have; run it with examples/verl_qwen3.sh (OpenRLHF runs grpo, dr_grpo, gspo, dapo)" >&2
    exit 2 ;;
  *) echo "BASELINE: expected grpo, dr_grpo, gspo or dapo, got '$BASELINE'" >&2; exit 2 ;;
esac
case "$BUDGET" in
  1) DEFAULT_ESTIMATOR=reward_budget ;;
  0) DEFAULT_ESTIMATOR="advbudget_$BASE_ESTIMATOR" ;;
  *) echo "BUDGET: expected 1 or 0, got '$BUDGET'" >&2; exit 2 ;;
esac
ESTIMATOR=${ESTIMATOR:-$DEFAULT_ESTIMATOR}
# The estimator's advbudget name in the run's name (as in the verl and TRL examples).
case "$ESTIMATOR" in
  reward_budget) ESTIMATOR_TAG=budget
    [ "$BUDGET_TOTAL" = 1.0 ] || [ "$BUDGET_TOTAL" = 1 ] || ESTIMATOR_TAG=budget$BUDGET_TOTAL ;;
  advbudget_group_norm) ESTIMATOR_TAG=grpo ;;
  advbudget_dr_grpo) ESTIMATOR_TAG=dr ;;
  *) ESTIMATOR_TAG=$ESTIMATOR ;;
esac
# One folder per model, baseline and estimator: runs never overwrite each other.
RUN_NAME=${RUN_NAME:-${MODEL_TAG}_${BASELINE}_${ESTIMATOR_TAG}}
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/advbudget/openrlhf/$RUN_NAME}

# Logs: TensorBoard always; wandb as well when a key is set (masked in --print).
LOGGER=(--logger.tensorboard_dir "$CKPT_DIR/tensorboard" --logger.wandb.run_name "$RUN_NAME")
if [ -n "${WANDB_API_KEY:-}" ]; then
  WANDB_KEY=$WANDB_API_KEY
  [ "$MODE" = print ] && WANDB_KEY='<WANDB_API_KEY>'
  LOGGER+=(--logger.wandb.key "$WANDB_KEY" --logger.wandb.project advbudget)
fi

FLAGS=(
  --algo.advantage.estimator "$ESTIMATOR"
  --advbudget.budget "$BUDGET_TOTAL"
  --advbudget.kappa_every "$KAPPA_EVERY"
  "${KL[@]}"
  --actor.model_name_or_path "$MODEL_PATH"
  --actor.num_nodes "$NNODES"
  --actor.num_gpus_per_node "$NGPUS"
  --ref.num_nodes "$NNODES"
  --ref.num_gpus_per_node "$NGPUS"
  --train.colocate_all
  --vllm.num_engines $((NNODES * NGPUS / VLLM_TP))
  --vllm.tensor_parallel_size "$VLLM_TP"
  --vllm.gpu_memory_utilization 0.6
  --vllm.enable_sleep
  --ds.enable_sleep
  --ds.zero_stage 3
  --ds.param_dtype bf16
  --ds.packing_samples
  --actor.gradient_checkpointing_enable
  --reward.remote_url "$REWARD_FILE"
  --data.prompt_dataset "$DATA_DIR/dapo/openrlhf/train.jsonl"
  --data.max_samples $((TOTAL_STEPS * 32))
  --data.input_key prompt
  --data.label_key label
  --data.apply_chat_template
  --data.max_len $((1024 + MAX_RESPONSE))
  --rollout.max_new_tokens "$MAX_RESPONSE"
  --rollout.n_samples_per_prompt 8
  --rollout.batch_size 32
  --rollout.micro_batch_size 8
  --rollout.temperature 1.0
  --train.batch_size 256
  --train.micro_batch_size 4
  --train.max_epochs 1
  --train.num_episodes 1
  --actor.adam.lr 1e-6
  --actor.eps_clip_low_high "${CLIP[@]}"
  --actor.policy_loss_type "$POLICY_LOSS"
  --actor.loss_agg_mode "$AGG"
  --actor.entropy_coef 0
  --eval.dataset "$DATA_DIR/dapo/openrlhf/val.jsonl"
  --eval.n_samples_per_prompt 8
  --eval.temperature 0.7
  --eval.steps 50
  --ckpt.save_steps 50
  --ckpt.path "$CKPT_DIR/ckpt"
  --ckpt.output_dir "$CKPT_DIR/final"
  --logger.logging_steps 1
  "${LOGGER[@]}"
  "${DAPO[@]+"${DAPO[@]}"}"
  "${ARGS[@]+"${ARGS[@]}"}"
)

if [ "$CPU_LOOP" = 1 ]; then
  # This script's flags, less what needs CUDA or flash-attn, plus the CPU settings; the
  # extra arguments (ARGS) stay last so that they can override any of them.
  HARNESS=$(cd "$(dirname "$0")/.." && pwd)/tests/adapters/openrlhf/cpu_loop
  OWN=("${FLAGS[@]:0:${#FLAGS[@]}-${#ARGS[@]}}")
  FLAGS=()
  skip=0
  for flag in "${OWN[@]}"; do
    if [ "$skip" -gt 0 ]; then skip=$((skip - 1)); continue; fi
    case "$flag" in
      --train.colocate_all|--vllm.enable_sleep|--ds.enable_sleep|--ds.packing_samples) continue ;;
      --logger.tensorboard_dir) skip=1; continue ;;
    esac
    FLAGS+=("$flag")
  done
  CPU_PROMPTS=2
  FLAGS+=(
    --vllm.num_engines 1 --vllm.tensor_parallel_size 1 --vllm.sync_backend gloo
    --ds.attn_implementation sdpa
    --reward.remote_url "$HARNESS/parity_reward.py"
    --data.max_samples $((TOTAL_STEPS * CPU_PROMPTS))
    --rollout.batch_size "$CPU_PROMPTS" --train.batch_size $((CPU_PROMPTS * 8))
    --actor.adam.lr 1e-3 --actor.lr_warmup_ratio 0
    --ckpt.save_steps "$TOTAL_STEPS"
    "${ARGS[@]+"${ARGS[@]}"}"
  )
  # Fake GPUs for the local Ray: actor and reference ranks, one engine.
  CPU_ENV=(PYTHONPATH="$HARNESS:$HARNESS/../stubs${PYTHONPATH:+:$PYTHONPATH}"
    RAY_OVERRIDE_RESOURCES="{\"CPU\": 16, \"GPU\": $((2 * NGPUS + 1))}" RAY_DEDUP_LOGS=0)
  if [ "$MODE" = print ]; then
    printf '%q ' env "${CPU_ENV[@]}" "$PYTHON" -m advbudget.adapters.openrlhf "${FLAGS[@]}"
    echo; exit 0
  fi
  if [ "$MODE" = train ]; then
    echo "CPU mode: model, data and checkpoints in $CPU_DIR" >&2
    [ -f "$MODEL_PATH/config.json" ] ||
      "$PYTHON" -c 'import sys; from advbudget.lab.tiny import build_tiny_model as b; b(sys.argv[1])' \
        "$MODEL_PATH"
    [ -f "$DATA_DIR/dapo/openrlhf/val.jsonl" ] ||
      "$PYTHON" -c 'from advbudget.lab.cli import main; main()' data prepare --sample \
        --format openrlhf --val-size 8 --output-dir "$DATA_DIR/dapo"
    exec env "${CPU_ENV[@]}" "$PYTHON" -m advbudget.adapters.openrlhf "${FLAGS[@]}"
  fi
fi

case "$MODE" in
  parse-only) exec "$PYTHON" -m advbudget.adapters.openrlhf --advbudget.parse_only "${FLAGS[@]}" ;;
  print)
    printf '%q ' ray job submit --address="$RAY_ADDRESS" \
      --runtime-env-json="{\"worker_process_setup_hook\": \"$HOOK\"}" \
      -- "$PYTHON" -m advbudget.adapters.openrlhf "${FLAGS[@]}"
    echo; exit 0 ;;
esac

# 1. Data: DAPO-Math-17K (deduplicated), 512 problems held out for validation, in
# OpenRLHF's JSON-lines layout (the same split as the verl and TRL examples: the same seed).
[ -f "$DATA_DIR/dapo/openrlhf/val.jsonl" ] ||
  advbudget data prepare --format openrlhf --val-size 512 --output-dir "$DATA_DIR/dapo"

# 2. Train (Ray cluster: `ray start --head --num-gpus $NGPUS` first).
ray job submit --address="$RAY_ADDRESS" \
  --runtime-env-json="{\"worker_process_setup_hook\": \"$HOOK\"}" \
  -- "$PYTHON" -m advbudget.adapters.openrlhf "${FLAGS[@]}"

# 3. Evaluate the final model as the paper does: avg@8 and pass@8.
advbudget eval --model "$CKPT_DIR/final" --benchmarks amc23,aime24,aime25,math500 --n 8 --k 8 \
  --temperature 0.7 --max-new-tokens "$MAX_RESPONSE" --backend vllm \
  --tensor-parallel-size "$VLLM_TP" --output-dir "$CKPT_DIR/eval"
echo "Scores in $CKPT_DIR/eval/scores.json (the paper reports $REPORT for $MODEL_TAG);" \
  "compare runs: advbudget compare $CKPT_DIR ..."
