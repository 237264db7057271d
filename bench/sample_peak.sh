#!/usr/bin/env bash
# What `ein sample` from an `ein quantize` file holds at its peak: the process's maximum resident
# set (GNU time) and the allocator's peak (`at most N allocated`), for one or two ein binaries
# side by side, on GPT-2 small (examples/scripts/gpt2_small.ein: 124 M parameters) and the
# byte-level GPT at T=256 L=6 H=8 D=512.
#
#   bash bench/sample_peak.sh                              # build/bin/ein
#   bash bench/sample_peak.sh /tmp/old/build/bin/ein       # and an older build beside it
#
# The checkpoints are made once (a training step each, B=1: the values do not matter, the bytes
# do) in $EIN_BENCH_DIR (default ~/.cache/ein/sample_peak) and quantized to q8_0 and q4_0.
set -euo pipefail
cd "$(dirname "$0")/.."
EIN=build/bin/ein
OTHERS=("$@")
DIR=${EIN_BENCH_DIR:-$HOME/.cache/ein/sample_peak}
mkdir -p "$DIR"

# GPT-2 small needs token ids: 64 Ki of them, any below the vocabulary, as u16.
if [ ! -f "$DIR/tokens.u16" ]; then
  python3 -c "
import random, struct, sys
random.seed(0)
sys.stdout.buffer.write(struct.pack('<65536H', *[random.randrange(50257) for _ in range(65536)]))
" >"$DIR/tokens.u16"
fi

make_files() {  # NAME SCRIPT TRAIN-ARGS...
  local name=$1 script=$2
  shift 2
  if [ ! -f "$DIR/$name.f32.safetensors" ]; then
    rm -rf "$DIR/$name.ck"
    "$EIN" train "$script" --steps 1 --checkpoint "$DIR/$name.ck" --device cpu "$@" >/dev/null
    cp "$DIR/$name.ck/step_1.safetensors" "$DIR/$name.f32.safetensors"
  fi
  for type in q8_0 q4_0; do
    [ -f "$DIR/$name.$type.safetensors" ] ||
      "$EIN" quantize "$DIR/$name.f32.safetensors" --type "$type" \
        -o "$DIR/$name.$type.safetensors" >/dev/null
  done
}

make_files gpt2_small examples/scripts/gpt2_small.ein --set B=1 --data "$DIR/tokens.u16"
make_files byte_gpt examples/gpt/byte_gpt.ein --set T=256,L=6,H=8,D=512,B=1

measure() {  # BINARY NAME SCRIPT WEIGHTS SAMPLE-ARGS...
  local bin=$1 name=$2 script=$3 weights=$4
  shift 4
  local err
  err=$(/usr/bin/time -f "maxrss_kb=%M" "$bin" sample "$script" "$weights" --length 8 \
          --temperature 0 --device cpu "$@" 2>&1 >/dev/null)
  local rss held peak
  rss=$(sed -n 's/.*maxrss_kb=\([0-9]*\).*/\1/p' <<<"$err")
  held=$(sed -n 's/.*; \([0-9.]* [kMG]*B\) of weights held.*/\1/p' <<<"$err")
  peak=$(sed -n 's/.*at most \([0-9.]* [kMG]*B\) allocated.*/\1/p' <<<"$err")
  printf '| %s | %s | %s | %.1f MB | %s | %s |\n' "$name" "$bin" "$(basename "$weights")" \
    "$(bc -l <<<"$rss / 1000")" "${peak:--}" "${held:--}"
}

# `ein quantize` of GPT-2 small's training checkpoint (1.49 GB: weights and AdamW's state).
for bin in "$EIN" "${OTHERS[@]}"; do
  /usr/bin/time -f "ein quantize, $bin: max RSS %M kB, %e s" "$bin" quantize \
    "$DIR/gpt2_small.f32.safetensors" -o "$DIR/requantized.safetensors" 2>&1 >/dev/null | tail -1
done
echo
echo "| model | ein | weights | max RSS | allocator's peak | weights held |"
echo "| --- | --- | --- | ---: | ---: | ---: |"
for bin in "$EIN" "${OTHERS[@]}"; do
  for type in f32 q8_0 q4_0; do
    measure "$bin" "GPT-2 small" examples/scripts/gpt2_small.ein \
      "$DIR/gpt2_small.$type.safetensors" --tokens 464,2068,7586
    measure "$bin" "byte GPT 256 6 8 512" examples/gpt/byte_gpt.ein \
      "$DIR/byte_gpt.$type.safetensors" --set T=256,L=6,H=8,D=512 --prompt "The "
  done
done
