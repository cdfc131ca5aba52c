#!/usr/bin/env bash
# Every check that needs a CUDA GPU: the `cuda` tests and the GPU benchmarks, each step's output in DIR/STEP.log.
#
#   bash bench/gpu.sh DIR [STEP ...]        (default: every step, in this order)
#
#   env      the GPU and the library versions
#   tests    pytest -m cuda (every command on CUDA, θ against a plain forward pass on each family)
#   draws    answer draws per step, block by block against up front, for 1, 4 and 16 questions
#   sweep    rollout on Llama-3.1-8B's shape, bf16, N=100: weight-read floor, engine over paths and questions, naive
#   profile  where a batched step's time goes (matrix products, attention, other kernels, host), 1 and 16 questions
#   graphs   the same sweep with the engine under --cuda-graphs
#   static   the same sweep with the answer steps as static steps, uncaptured (the baseline of a CUDA-graph capture)
#   compile  --compile against eager, 3 methods × 32 paths, N=100, on growing and on static steps
#   capture  --cuda-graphs against eager and uncaptured static steps at 1 and 16 questions, and the capture time
#   cot      chain-of-thought tokens/s at R = 1, 8, 32: the growing, static and CUDA-graph decodes against generate and
#            the weight-read floor (issue 50's targets); per-token cost early and late in a long rollout
#   train    peak memory of SC training (LoRA) against paths per update, with and without checkpointing
#   shapes   the eager sweep on OLMo-2-7B's and Qwen2.5-7B's shapes
#   paper    `beliefdrift evaluate` from the CLI on a saved random model of the shape (in DIR/paper, ~16 GB for 8B):
#            the paper's 7 methods, J 32, N 100, CSQA, stopped after BUDGET seconds (240); path-answers/s and the
#            full CSQA time at that rate (bench/paper_scale.py; CSQA from $BELIEFDRIFT_DATA)
#
# Random weights of the real shapes, made on the GPU: nothing is downloaded. BENCH_ARGS is added to every
# benchmark that builds a shape (e.g. BENCH_ARGS="--tokenizer DIR" where the default model is not installed).
# SHAPE (llama-3.1-8b), DEVICE (cuda) and STEPS (answers per path, 100) change every step but `shapes`:
# SHAPE=tiny DEVICE=cpu STEPS=5 BUDGET=300 checks the script itself on a CPU (all steps but env and graphs, which
# need CUDA, and shapes, whose shapes are fixed).
# A step that fails is reported and the next one runs; the exit status counts the failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash bench/gpu.sh DIR [STEP ...]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(env tests draws capture sweep profile graphs static compile cot train shapes paper)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
read -r -a extra <<<"${BENCH_ARGS:-}"
shape=${SHAPE:-llama-3.1-8b}
device=${DEVICE:-cuda}
sweep=(--device "$device" --dtype bfloat16 --steps "${STEPS:-100}" "${extra[@]}")

run_step() {
  case $1 in
    env) nvidia-smi && "$py" -c "import torch, transformers, peft; print(torch.__version__, torch.version.cuda,
torch.cuda.get_device_name(), 'transformers', transformers.__version__, 'peft', peft.__version__)" ;;
    tests) "$py" -m pytest -m cuda -v -rs --durations=10 -p no:cacheprovider ;;
    draws) "$py" bench/draws.py --device "$device" --steps "${STEPS:-100}" ;;
    sweep) "$py" bench/rollout.py --shape "$shape" "${sweep[@]}" ;;
    profile) "$py" bench/profile_step.py --shape "$shape" --device "$device" --dtype bfloat16 --steps 20 "${extra[@]}" ;;
    graphs) "$py" bench/rollout.py --shape "$shape" "${sweep[@]}" --cuda-graphs ;;
    static) "$py" bench/rollout.py --shape "$shape" "${sweep[@]}" --static-steps ;;
    compile) "$py" bench/compile.py --shape "$shape" --paths 32 "${sweep[@]}" &&
      "$py" bench/compile.py --shape "$shape" --paths 32 "${sweep[@]}" --static-steps ;;
    capture) "$py" bench/cuda_graphs.py --shape "$shape" "${sweep[@]}" ;;
    cot) "$py" bench/reasoning.py --shape "$shape" --device "$device" --dtype bfloat16 --rollouts 1 8 32 \
      --tokens 128 --long-tokens 512 "${extra[@]}" ;;
    train) "$py" bench/train.py --memory --shape "$shape" --device "$device" --checkpointing ;;
    shapes) "$py" bench/rollout.py --shape olmo-2-7b "${sweep[@]}" &&
      "$py" bench/rollout.py --shape qwen2.5-7b "${sweep[@]}" ;;
    paper) "$py" bench/paper_scale.py "$out/paper" --shape "$shape" "${sweep[@]}" --budget "${BUDGET:-240}" ;;
    *) echo "unknown step $1 (env tests draws capture sweep profile graphs static compile cot train shapes paper)" >&2
      return 2 ;;
  esac
}

failed=0
for step in "${steps[@]}"; do
  start=$SECONDS
  run_step "$step" 2>&1 | tee "$out/$step.log"
  status=${PIPESTATUS[0]}
  echo "== $step: exit $status after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  [ "$status" -eq 0 ] || failed=$((failed + 1))
done
exit "$failed"
