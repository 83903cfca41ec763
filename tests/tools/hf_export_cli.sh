#!/bin/bash
# `domino plan --model config.json` for Hugging Face configs, and `domino export` of the plan.
# Usage: hf_export_cli.sh DOMINO SOURCE_DIR
set -uo pipefail
domino=$1 src=$2
hf=$src/tests/models/data/hf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A Llama-3-8B config.json and a Qwen2-7B folder plan like catalog models; the plan names the file.
"$domino" plan --model "$hf/Meta-Llama-3-8B/config.json" --cluster dgx-h100:1 --seq-len 2048 \
  --global-batch 16 --out "$tmp/llama.yaml" >"$tmp/llama.txt" || fail "plan of a Llama config failed"
grep -q "^# Meta-Llama-3-8B on dgx-h100:1" "$tmp/llama.txt" || fail "plan table: $(head -1 "$tmp/llama.txt")"
grep -q "^model: \".*/Meta-Llama-3-8B/config.json\"" "$tmp/llama.yaml" || fail "plan does not name the config"
"$domino" simulate --plan "$tmp/llama.yaml" >/dev/null || fail "the Llama plan does not load back"
"$domino" plan --model "$hf/Qwen2-7B" --cluster dgx-h100:2 --seq-len 4096 --global-batch 32 \
  --out "$tmp/qwen.yaml" >/dev/null || fail "plan of a Qwen2 folder failed"
grep -q "^model: \".*/Qwen2-7B\"" "$tmp/qwen.yaml" || fail "plan does not name the folder"

# An architecture domino does not read is refused in one line naming the file and the field.
printf '{\n  "model_type": "t5",\n  "d_model": 512\n}\n' >"$tmp/t5.json"
"$domino" plan --model "$tmp/t5.json" --cluster dgx-h100:1 --out "$tmp/t5.yaml" >/dev/null \
  2>"$tmp/err.txt" && fail "a T5 config was accepted"
[[ $(wc -l <"$tmp/err.txt") -eq 1 ]] || fail "not one line: $(cat "$tmp/err.txt")"
grep -q "t5.json:2:17: model_type: unsupported architecture 't5'" "$tmp/err.txt" ||
  fail "wrong message: $(cat "$tmp/err.txt")"
[[ ! -e $tmp/t5.yaml ]] || fail "a refused model wrote a plan"

# Every framework takes the Qwen2 plan; Megatron's arguments carry its shape and degrees.
for to in megatron nemo torchtitan; do
  "$domino" export "$tmp/qwen.yaml" --to $to >"$tmp/$to.txt" || fail "export --to $to failed"
  [[ $(head -c 2 "$tmp/$to.txt") == "# " ]] || fail "export --to $to has no header"
done
grep -q -- "--num-query-groups 4" "$tmp/megatron.txt" || fail "no GQA in the Megatron arguments"
tp=$(grep "^parallel:" "$tmp/qwen.yaml" | grep -o "{tp: [0-9]*" | grep -o "[0-9]*$")
grep -q -- "--tensor-model-parallel-size $tp " "$tmp/megatron.txt" || fail "tp $tp not exported"
grep -q "^  tensor_model_parallel_size: $tp$" "$tmp/nemo.txt" || fail "tp $tp not in NeMo"
grep -q "^tensor_parallel_degree = $tp$" "$tmp/torchtitan.txt" || fail "tp $tp not in torchtitan"

# DeepSpeed-Domino runs 2 row slices on one data-parallel rank: a plan beyond that is refused in
# one line, with nothing on stdout.
if "$domino" export "$tmp/llama.yaml" --to deepspeed >"$tmp/ds.txt" 2>"$tmp/err.txt"; then
  grep -q -- "--tensor-model-parallel-size" "$tmp/ds.txt" || fail "no DeepSpeed-Domino arguments"
else
  [[ ! -s $tmp/ds.txt ]] || fail "a refused export printed settings"
  [[ $(wc -l <"$tmp/err.txt") -eq 1 ]] || fail "not one line: $(cat "$tmp/err.txt")"
  grep -q "DeepSpeed-Domino cannot run this plan: " "$tmp/err.txt" ||
    fail "wrong refusal: $(cat "$tmp/err.txt")"
fi
"$domino" export "$tmp/llama.yaml" --to caffe >/dev/null 2>&1 && fail "unknown framework accepted"

# A model YAML states the same features as a config.json (here inline in a plan): each is an
# approximation, and the Megatron export launches them.
cat >"$tmp/inline.yaml" <<'PLAN'
model: {name: "windowed", layers: 4, hidden: 512, heads: 8, kv_heads: 2, ffn: 1024, vocab: 1000, seq_len: 2048, activation: swiglu, norm: rmsnorm, bias: false, qk_norm: true, window: {tokens: 256, full_every: 2}}
cluster: dgx-h100:1
training: {seq_len: 2048, micro_batch: 1, global_batch: 8}
parallel: {tp: 1, pp: 1, dp: 8}
PLAN
"$domino" export "$tmp/inline.yaml" --to megatron >"$tmp/inline.txt" || fail "inline features: export failed"
grep -q -- "--qk-layernorm" "$tmp/inline.txt" || fail "qk_norm not launched: $(cat "$tmp/inline.txt")"
grep -q -- "--window-size 256,0" "$tmp/inline.txt" || fail "window not launched"
grep -q -- "--window-attn-skip-freq 2" "$tmp/inline.txt" || fail "window's full layers not launched"
# The window runs as megatron-core prices it (cp 1): no difference to name; with the stack domino,
# whose kernels run none, it is one.
grep -q "^# differs: model windowed: a sliding attention window" "$tmp/inline.txt" &&
  fail "a priced window named a difference: $(grep differs "$tmp/inline.txt")"
sed 's/^cluster: dgx-h100:1$/cluster: dgx-h100:1\nstack: domino/' "$tmp/inline.yaml" >"$tmp/unpriced.yaml"
"$domino" export "$tmp/unpriced.yaml" --to megatron >"$tmp/unpriced.txt" || fail "export of the domino stack failed"
grep -q "^# differs: model windowed: a sliding attention window of 256 tokens before each query (window) on 2 of 4 layers: launched (--window-size 256,0 --window-attn-skip-freq 2), priced as full causal attention, the same up to 257 tokens$" \
  "$tmp/unpriced.txt" || fail "no differs line for the window: $(grep differs "$tmp/unpriced.txt")"
"$domino" simulate --plan "$tmp/unpriced.yaml" | grep -q "^# note: windowed: its sliding window of 256 tokens before each query is priced as full causal attention: the stack domino's kernels run no window$" ||
  fail "simulate names no unpriced window: $("$domino" simulate --plan "$tmp/unpriced.yaml" | head -4)"
"$domino" simulate --plan "$tmp/inline.yaml" | grep -q "^# note: windowed" && fail "a priced window has a note"
# `models` counts the attention as MFU does: 12 x 4 layers x 1024 keys x 512 causal, 240 keys
# (256 - 256^2 / 4096) within the window.
printf 'name: w\nlayers: 4\nhidden: 512\nheads: 8\nffn: 1024\nvocab: 1000\nseq_len: 2048\nactivation: swiglu\nnorm: rmsnorm\nwindow: 256\n' >"$tmp/w.yaml"
"$domino" models "$tmp/w.yaml" | grep -q "^attention as MFU counts it: 2.517e+07 causal, 5.898e+06 within the sliding window$" ||
  fail "models counts no window: $("$domino" models "$tmp/w.yaml" | grep MFU)"
sed -i 's/qk_norm: true/qkv_bias: true, bias: true/; s/bias: false, //' "$tmp/inline.yaml"
"$domino" simulate --plan "$tmp/inline.yaml" >/dev/null 2>"$tmp/err.txt" && fail "qkv_bias with bias accepted"
grep -q "inline.yaml:1:.*model.qkv_bias: biases on Q, K and V only need bias: false" "$tmp/err.txt" ||
  fail "wrong message: $(cat "$tmp/err.txt")"
echo "hf config and export cli ok"
