#!/usr/bin/env bash
# The key-value cache in bf16 against f32: `ein sample`'s tokens/s (median over the run, after
# the first draw) of this build with and without `--cache-dtype bf16`, alternating, per round.
# GPT-2 small from q8_0 and f32 codes at a nearly full cache (1000 prompt tokens, 20 drawn:
# the attention reads ~1000 cached rows a layer) and q8_0 early in the window (8 prompt
# tokens, 60 drawn); the byte GPT at 256 6 8 512 from q8_0 drawing its whole window.
#
#   bash bench/sample_cache_dtype.sh [ROUNDS]
#
# Checkpoints as bench/sample_peak.sh makes them (run it first), in $EIN_BENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
DIR=${EIN_BENCH_DIR:-$HOME/.cache/ein/sample_peak}
source bench/sample_ab.sh
TOKENS=$(tokens 8)
LONG=$(tokens 1000)

echo "| model | weights | f32 cache tokens/s | bf16 cache tokens/s | bf16/f32 |"
echo "| --- | --- | ---: | ---: | ---: |"
byte=examples/gpt/byte_gpt.ein
gpt2=examples/scripts/gpt2_small.ein
NEW_ARGS="--cache-dtype bf16" ab_rows build/bin/ein "$ROUNDS" \
  's/.*(median; \([0-9.]*\) tokens\/s.*/\1/p' new/old \
  "GPT-2 small, 1000|$gpt2|gpt2_small.q8_0.safetensors|--tokens $LONG --length 20" \
  "GPT-2 small, 1000|$gpt2|gpt2_small.f32.safetensors|--tokens $LONG --length 20" \
  "GPT-2 small, 8|$gpt2|gpt2_small.q8_0.safetensors|--tokens $TOKENS --length 60" \
  "byte 256 6 8 512|$byte|byte_gpt.q8_0.safetensors|--set T=256,L=6,H=8,D=512 --prompt GNU_GENE --length 249"
