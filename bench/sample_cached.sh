#!/usr/bin/env bash
# Tokens through the key-value cache: `ein sample`'s tokens/s (median over the run, after the
# first draw) for this build and another side by side, alternating, per round. The byte-level
# GPT at 256 6 8 512 (f32, q8_0, q4_0; an 8-byte prompt, 249 tokens drawn: the whole window)
# and GPT-2 small (f32, q8_0, q4_0; 8 prompt tokens, 60 drawn: positions 8-67 of its 1024;
# and q8_0 from 1000 prompt tokens, 20 drawn, the row "GPT-2 small, 1000": a cache nearly full).
#
#   bash bench/sample_cached.sh /path/to/old/build/bin/ein [ROUNDS]
#
# Checkpoints as bench/sample_peak.sh makes them (run it first), in $EIN_BENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: sample_cached.sh OLD-EIN [ROUNDS]}
ROUNDS=${2:-3}
DIR=${EIN_BENCH_DIR:-$HOME/.cache/ein/sample_peak}
source bench/sample_ab.sh
TOKENS=$(tokens 8)
LONG=$(tokens 1000)

echo "| model | weights | old tokens/s | new tokens/s | new/old |"
echo "| --- | --- | ---: | ---: | ---: |"
byte=examples/gpt/byte_gpt.ein
gpt2=examples/scripts/gpt2_small.ein
big="--set T=256,L=6,H=8,D=512 --prompt GNU_GENE --length 249"
ab_rows "$OLD" "$ROUNDS" 's/.*(median; \([0-9.]*\) tokens\/s.*/\1/p' new/old \
  "byte 256 6 8 512|$byte|byte_gpt.f32.safetensors|$big" \
  "byte 256 6 8 512|$byte|byte_gpt.q8_0.safetensors|$big" \
  "byte 256 6 8 512|$byte|byte_gpt.q4_0.safetensors|$big" \
  "GPT-2 small|$gpt2|gpt2_small.f32.safetensors|--tokens $TOKENS --length 60" \
  "GPT-2 small|$gpt2|gpt2_small.q8_0.safetensors|--tokens $TOKENS --length 60" \
  "GPT-2 small|$gpt2|gpt2_small.q4_0.safetensors|--tokens $TOKENS --length 60" \
  "GPT-2 small, 1000|$gpt2|gpt2_small.q8_0.safetensors|--tokens $LONG --length 20"
