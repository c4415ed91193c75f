#!/usr/bin/env bash
# Qwen3-8B on DAPO-Math-17K with OpenRLHF 0.11.2: reward budgeting on top of a baseline.
#
#   bash examples/openrlhf_qwen3.sh                           # budget, GRPO (group_norm) settings
#   BASELINE=dr_grpo bash examples/openrlhf_qwen3.sh          # budget, Dr.GRPO settings
#   BUDGET=0 BASELINE=group_norm|dr_grpo bash examples/openrlhf_qwen3.sh   # the plain baseline
#   ESTIMATOR=group_norm BUDGET=0 bash examples/openrlhf_qwen3.sh  # OpenRLHF's own code path
#   bash examples/openrlhf_qwen3.sh --parse-only   # parse every flag with OpenRLHF's parser (CPU)
#   bash examples/openrlhf_qwen3.sh --print        # print the training command
#
# Budgeting replaces only how rewards become group advantages (--algo.advantage.estimator
# reward_budget, through `python -m advbudget.adapters.openrlhf`, which patches OpenRLHF's
# trainer inside the PPOTrainer Ray actor via Ray's worker_process_setup_hook); KL,
# clipping, length penalties and returns stay OpenRLHF's. The baseline (BUDGET=0) runs our
# mirror of OpenRLHF's estimator (advbudget_group_norm / advbudget_dr_grpo: the same
# advantages, tested) so that both runs log the same train/advbudget_* metrics and κ_eff
# (every KAPPA_EVERY steps). 8 samples per prompt, 32 prompts per rollout batch, vLLM hybrid
# engine (colocated, sleep mode), Ray job submit, then `advbudget eval` on the final model.
# Extra arguments go to OpenRLHF. Every flag parses with OpenRLHF 0.11.2's parser (tested on
# CPU); the full run needs GPUs and has not been run by the advbudget tests.
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
BASELINE=${BASELINE:-group_norm}   # group_norm (GRPO) | dr_grpo
BUDGET=${BUDGET:-1}                # 1: reward budgeting; 0: OpenRLHF's own estimator
BUDGET_TOTAL=${BUDGET_TOTAL:-1.0}
KAPPA_EVERY=${KAPPA_EVERY:-10}     # κ_eff every N steps (one extra actor forward); 0: off
MODEL=${MODEL:-Qwen/Qwen3-8B}
DATA_DIR=${DATA_DIR:-$HOME/data/advbudget}
NGPUS=${NGPUS:-8}
NNODES=${NNODES:-1}
VLLM_TP=${VLLM_TP:-2}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/advbudget/openrlhf_qwen3_8b_${BASELINE}_budget${BUDGET}}
HOOK=advbudget.adapters.openrlhf.install
REWARD_FILE=$("$PYTHON" -c 'import advbudget.rewards.openrlhf as m; print(m.__file__)' 2>/dev/null ||
  echo "$(cd "$(dirname "$0")/.." && pwd)/advbudget/rewards/openrlhf.py")

case "$BASELINE" in
  group_norm) KL=(--algo.kl.use_loss --algo.kl.init_coef 1e-3 --algo.kl.estimator k3) ;;
  dr_grpo) KL=(--algo.kl.init_coef 0) ;;
  *) echo "BASELINE: expected group_norm or dr_grpo, got '$BASELINE'" >&2; exit 2 ;;
esac
if [ "$BUDGET" = 1 ]; then DEFAULT_ESTIMATOR=reward_budget; else DEFAULT_ESTIMATOR="advbudget_$BASELINE"; fi
ESTIMATOR=${ESTIMATOR:-$DEFAULT_ESTIMATOR}

FLAGS=(
  --algo.advantage.estimator "$ESTIMATOR"
  --advbudget.budget "$BUDGET_TOTAL"
  --advbudget.kappa_every "$KAPPA_EVERY"
  "${KL[@]}"
  --actor.model_name_or_path "$MODEL"
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
  --actor.eps_clip_low_high 0.2 0.28
  --eval.dataset "$DATA_DIR/aime24/openrlhf/train.jsonl"
  --eval.n_samples_per_prompt 8
  --eval.temperature 0.7
  --eval.steps 10
  --ckpt.save_steps 50
  --ckpt.path "$CKPT_DIR/ckpt"
  --ckpt.output_dir "$CKPT_DIR/final"
  --logger.logging_steps 1
  "${ARGS[@]+"${ARGS[@]}"}"
)

case "$MODE" in
  parse-only) exec "$PYTHON" -m advbudget.adapters.openrlhf --advbudget.parse_only "${FLAGS[@]}" ;;
  print)
    printf '%q ' ray job submit --address="$RAY_ADDRESS" \
      --runtime-env-json="{\"worker_process_setup_hook\": \"$HOOK\"}" \
      -- "$PYTHON" -m advbudget.adapters.openrlhf "${FLAGS[@]}"
    echo; exit 0 ;;
esac

# 1. Data: DAPO-Math-17K (deduplicated) and AIME24 in OpenRLHF's JSON-lines layout.
[ -f "$DATA_DIR/dapo/openrlhf/train.jsonl" ] ||
  advbudget data prepare --format openrlhf --output-dir "$DATA_DIR/dapo"
[ -f "$DATA_DIR/aime24/openrlhf/train.jsonl" ] ||
  advbudget data prepare --format openrlhf --source HuggingFaceH4/aime_2024 --no-shuffle \
    --output-dir "$DATA_DIR/aime24"

# 2. Train (Ray cluster: `ray start --head --num-gpus $NGPUS` first).
ray job submit --address="$RAY_ADDRESS" \
  --runtime-env-json="{\"worker_process_setup_hook\": \"$HOOK\"}" \
  -- "$PYTHON" -m advbudget.adapters.openrlhf "${FLAGS[@]}"

# 3. Evaluate the final model as the paper does: avg@8.
advbudget eval --model "$CKPT_DIR/final" --benchmarks amc23,aime24,aime25,math500 --n 8 \
  --temperature 0.7 --max-new-tokens "$MAX_RESPONSE" --backend vllm \
  --tensor-parallel-size "$VLLM_TP" --output-dir "$CKPT_DIR/eval"
