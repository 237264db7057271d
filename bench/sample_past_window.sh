#!/usr/bin/env bash
# Tokens past the window: `ein sample`'s time a token (median over the run) where every token
# recomputes its window, for this build and another side by side, alternating, per round:
# the byte-level GPT at 64 2 4 128 (f32) and 256 6 8 512 (f32, q8_0), and GPT-2 small (f32,
# q8_0; 1024 prompt tokens, 4 drawn: the first from the prompt's pass, 3 past the window).
#
#   bash bench/sample_past_window.sh /path/to/old/build/bin/ein [ROUNDS]
#
# Checkpoints as bench/sample_peak.sh makes them (run it first), in $EIN_BENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: sample_past_window.sh OLD-EIN [ROUNDS]}
ROUNDS=${2:-3}
DIR=${EIN_BENCH_DIR:-$HOME/.cache/ein/sample_peak}
if [ ! -f "$DIR/byte64.safetensors" ]; then
  build/bin/ein train examples/gpt/byte_gpt.ein --set B=1 --steps 1 --checkpoint "$DIR/byte64.ck" \
    --device cpu >/dev/null
  cp "$DIR/byte64.ck/step_1.safetensors" "$DIR/byte64.safetensors"
fi
head -c 64 examples/gpt/corpus.txt >"$DIR/prompt64.txt"
head -c 256 examples/gpt/corpus.txt >"$DIR/prompt256.txt"
source bench/sample_ab.sh
TOKENS=$(tokens 1024)

echo "| model | weights | old ms a token | new ms a token | old/new |"
echo "| --- | --- | ---: | ---: | ---: |"
byte=examples/gpt/byte_gpt.ein
gpt2=examples/scripts/gpt2_small.ein
big="--set T=256,L=6,H=8,D=512 --prompt-file $DIR/prompt256.txt --length 40"
small="--prompt-file $DIR/prompt64.txt --length 200"
ab_rows "$OLD" "$ROUNDS" 's/.*s: \([0-9.]*\) ms a token.*/\1/p' old/new \
  "byte 64 2 4 128|$byte|byte64.safetensors|$small" \
  "byte 256 6 8 512|$byte|byte_gpt.f32.safetensors|$big" \
  "byte 256 6 8 512|$byte|byte_gpt.q8_0.safetensors|$big" \
  "GPT-2 small|$gpt2|gpt2_small.f32.safetensors|--tokens $TOKENS --length 4" \
  "GPT-2 small|$gpt2|gpt2_small.q8_0.safetensors|--tokens $TOKENS --length 4"
