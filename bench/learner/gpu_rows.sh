#!/usr/bin/env bash
# Issue 54's rows, then issue 34's done-when rows, on a lent GPU, in the order they matter (all
# of them take more than one call's 600 s; name the rows a call should run: named rows still
# run in this file's order). Issue 54's call, in its order (none of it has run yet):
#   bash bench/learner/gpu_rows.sh config_24gb_cap22 config_24gb_ondevice lora_7b \
#       config_auto_8192 config_auto_16384 lora_7b_h100_f32base default_1p5b_mb16k \
#       default_1p5b_chunk4k lora_0p5b_g2_7gib
# The lent machine has torch but not this project's other packages, and no network; carry them:
#   here, once:  (see docs/benchmarks.md, "Issue 34 on a lent GPU" for the pip download line)
#                rm -rf .baseline && mkdir .baseline && git archive 1b02179 | tar -x -C .baseline
#                rm -rf .before && mkdir .before && git archive 5279de8 | tar -x -C .before
#   device run:  command "bash bench/learner/gpu_rows.sh [ROW...]",
#                carry [".whl", ".baseline", ".before"]
# With ROW names (below, and "tests") only those run: the rest of a run a time limit cut.
# Every row is one bench.learner JSON line in $OUT/rows.jsonl (its "row" names it); stderr of
# all rows in $OUT/log.txt; the CUDA-only tests' outcome in $OUT/gpu_tests.txt. A row that fails
# or runs out of memory is recorded and the next runs.
set -u
WANT=" $* "
wanted() { [ "$WANT" = "  " ] || [[ "$WANT" == *" $1 "* ]]; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
# every recompile and its reason into log.txt: the compiled layers, the reference's and the LM
# head's kernels share dynamo's limit of graphs per function, past which it runs them eager
export TORCH_LOGS=recompiles
OUT=${OUT:-/tmp/gpu_rows}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the rows run in their own directory (--profile writes there)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/card.txt"
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" >>"$OUT/card.txt"
# 0. the tests that need CUDA (pytest -m gpu; the modules import neither Ray nor vLLM): seconds
wanted tests && timeout 120 python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
    tests/unit/launch/loop/test_colocation.py tests/unit/learner/test_learner.py \
    tests/unit/common/memory/test_fit.py tests/unit/learner/test_offload.py \
    >"$OUT/gpu_tests.txt" 2>&1

row() {  # row NAME DIR ARGS...: bench.learner in DIR (this checkout or the baseline's)
    local name=$1 dir=$2 start=$SECONDS module=bench.learner
    shift 2
    wanted "$name" || return 0
    # a baseline checkout older than bench/ has the bench at its former name
    [ -d "$dir/bench/learner" ] || module=learner.bench
    echo "== $name: $*" | tee -a "$OUT/log.txt"
    if (cd "$dir" && PYTHONPATH=/tmp/site:. timeout 240 python3 -m $module --steps 3 \
        --warmup 1 "$@" --out /tmp/row.json 2>>"$OUT/log.txt" >/dev/null); then
        python3 -c "import json,sys; r=json.load(open('/tmp/row.json')); r['row']=sys.argv[1]; \
r['wall_s']=int(sys.argv[2]); print(json.dumps(r))" "$name" $((SECONDS - start)) >>"$OUT/rows.jsonl"
    else
        echo "{\"row\": \"$name\", \"failed\": true, \"wall_s\": $((SECONDS - start))}" \
            >>"$OUT/rows.jsonl"
    fi
    rm -f /tmp/row.json
}

SHIPPED=(--preset qwen2.5-1.5b --prompt-len 384)
# Issue 54. The 24gb config's learner step (its state on the host: offload_optimizer = "step")
# under a 22 GiB cap, a 24 GB card's least; its memory plan counts the step at 18.0 GiB, which
# a sleeping engine's 1.5 joins on the card. Then the same step uncapped with the state on the
# device: the same micro-batches (the capped learner's budget from learner.memory_gib, by the
# arithmetic it runs) and layers checkpointed, compile off as the offloaded step runs it; the
# ratio of their step_s is the offload's price. Two timed steps each: every micro-batch copies
# the fp32 weights to the card twice and its gradients back, and AdamW steps 1.5B on the CPU.
TWENTY_FOUR=("${SHIPPED[@]}" --config configs/qwen2.5-coder-1.5b-mbpp-24gb.toml)
row config_24gb_cap22 . "${TWENTY_FOUR[@]}" --steps 2 --memory-cap-gib 22
if wanted config_24gb_ondevice; then
    SAME=$(python3 -c "from common.memory.arithmetic import ModelShape; from common.memory.fit import \
fit_micro_batch; from bench.learner.step import PRESETS, learner_config, parse_args; \
c = learner_config(*parse_args(['--config', 'configs/qwen2.5-coder-1.5b-mbpp-24gb.toml'])); \
s = ModelShape.from_config({**PRESETS['qwen2.5-1.5b'], 'model_type': 'qwen2'}); \
print(fit_micro_batch(s, c, device='cuda').tokens)" 2>>"$OUT/log.txt")
    row config_24gb_ondevice . "${TWENTY_FOUR[@]}" --steps 2 --learner.offload_optimizer never \
        --learner.memory_gib 0 --micro-batch-tokens "${SAME:-8192}" --learner.compile false
fi
SEVEN=(--preset qwen2.5-7b --lora --learner.lora.target_modules
    '["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]')
# Wall times of each row on the H200 of 2026-11-27 in brackets (the first compiled step included).
# 1. the 1.5B default case (utilisation; same FLOP count), with a profile of one more step, and
#    the same at 5279de8 (before the LM head's compiled softmax math and the compiled frozen
#    reference: .before, `git archive 5279de8`) on the same card [105, 66 s]
row default_1p5b . --preset qwen2.5-1.5b --profile "$OUT/profile_default_1p5b.txt"
row default_1p5b_5279de8 .before --preset qwen2.5-1.5b
# 2. the 0.5B LoRA G = 2 case at the defaults (the frozen base in bf16 on CUDA since 2026-11-27,
#    lora.base_dtype "auto": counted 9.1 GiB), with a profile, and with the float32 base it
#    measured 9.25 GiB with [139, 120 s]
row lora_0p5b_g2 . --preset qwen2.5-coder-0.5b --lora --group 2 \
    --profile "$OUT/profile_lora_0p5b_g2.txt"
row lora_0p5b_g2_f32base . --preset qwen2.5-coder-0.5b --lora --group 2 \
    --learner.lora.base_dtype float32
# 3. the shipped 1.5B config's learner, now (its defaults) and at 1b02179 on the same card
#    [166, 72 s]
row config_now . "${SHIPPED[@]}" --config configs/qwen2.5-coder-1.5b-mbpp.toml
row config_1b02179 .baseline "${SHIPPED[@]}" --gradient-checkpointing --micro-batch-tokens 16384
# 4. the 7B LoRA case on every linear layer at the defaults (bf16 base: counted 47 GiB; with
#    the float32 base it measured 78.1) [~200 s]
row lora_7b . "${SEVEN[@]}"
# 5. the shipped config's checkpointing: at a 32 GiB target, "auto" checkpoints the fewest
#    layers that fit micro-batches of 8192 tokens (14 of 28 by today's count) or 16384 (22 of
#    28), against config_now's every layer at 27 GiB (~21k-token micro-batches): the fastest
#    that stays under 36 GiB decides the shipped setting
row config_auto_8192 . "${SHIPPED[@]}" --config configs/qwen2.5-coder-1.5b-mbpp.toml \
    --gradient-checkpointing auto --micro-batch-tokens 8192 --learner.memory_gib 32
row config_auto_16384 . "${SHIPPED[@]}" --config configs/qwen2.5-coder-1.5b-mbpp.toml \
    --gradient-checkpointing auto --micro-batch-tokens 16384 --learner.memory_gib 32
# 6. the 0.5B LoRA case with a 7 GiB target (checkpointing the fewest layers that fit it), the
#    1.5B default with fewer, larger micro-batches, and with larger LM-head chunks
row lora_0p5b_g2_7gib . --preset qwen2.5-coder-0.5b --lora --group 2 \
    --gradient-checkpointing auto --learner.memory_gib 7
row default_1p5b_mb16k . --preset qwen2.5-1.5b --micro-batch-tokens 16384
row default_1p5b_chunk4k . --preset qwen2.5-1.5b --learner.logprob_chunk_tokens 4096
# 7. the 7B LoRA case with the float32 base as an 80 GB card plans it (its 79.1 GiB x 0.9, the
#    target a learner without one takes on such a card: common/memory/fit.py)
row lora_7b_h100_f32base . "${SEVEN[@]}" --learner.lora.base_dtype float32 \
    --learner.memory_gib 71.2
