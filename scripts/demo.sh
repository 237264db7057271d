#!/usr/bin/env bash
# The main job: a short tour of `ein shape` (static shape inference for einops patterns and
# its diagnostics), the same patterns computing on tensors (example 02), autograd with its
# FLOP accounting (example 03), `.ein` scripts checked statically, the lecture's linear
# regression, and then a byte-level GPT written in .ein trained on CPU from the corpus in
# examples/gpt/ (a few minutes), ending with a generated sample. Fails when the GPT's final
# loss is not below the threshold stated in the README. Needs build/.
set -uo pipefail
cd "$(dirname "$0")/.."
ein=build/bin/ein

run() {
  printf '\n$ ein shape'
  printf " '%s'" "$@"
  printf '\n'
  "$ein" shape "$@"
  local rc=$?
  [ "$rc" -eq 0 ] || printf '(exit %d)\n' "$rc"
}

echo "== ein shape: einops patterns, resolved statically =="
run rearrange 'b s (h d) -> b h s d' '(8,1024,768)' h=12
run einsum 'b h i d, b h j d -> b h i j' '(8,12,1024,64)' '(8,12,1024,64)'
run reduce 'b c (h h2) (w w2) -> b c h w' '(10,20,30,40)' h2=2 w2=2 --reduction max
run repeat 'h w -> (h h2) (w w2) c' '(30,40)' h2=2 w2=2 c=3
run pack 'i j * k' '(2,3,5)' '(2,3,7,5)' '(2,3,7,9,5)'
run unpack 'i j * k' '(2,3,71,5)' --ps '[(),(7,),(7,9)]'
run parse_shape 'batch _ h w' '(2,3,5,7)'
echo
echo "== ein extensions: compositions in einsum, var with an explicit ddof =="
run einsum 'b s (h d), h d f -> b s (h f)' '(2,5,12)' '(3,4,7)'
run reduce 'b t d -> b d' '(2,5,8)' --reduction 'var(ddof=1)'
echo
echo "== how a plan looks =="
run rearrange 'b (h w) c -> c b w h' '(2,12,3)' h=3 --explain
echo
echo "== diagnostics point at the mistake =="
run rearrange 'b (h w) c -> b h w c' '(2,12,3)' h=5
run einsum 'b s d, d f -> b s f' '(2,5,12)' '(16,7)'
run rearrange 'b s (h d) -> b h s d' '(2,5,12)'
run rearrange 'b c -> b c h' '(2,3)'
run reduce 'b t d -> b d' '(2,5,8)' --reduction var
echo
echo "== the same patterns on tensors (build/bin/example_02_tensors) =="
build/bin/example_02_tensors
echo
echo "== gradients and their FLOPs, then a small training run (build/bin/example_03_autograd) =="
build/bin/example_03_autograd
echo
echo "== a .ein script checked statically: the lecture's Cruncher and its parameter table =="
"$ein" check examples/scripts/cruncher.ein
echo
echo "== the lecture's train_loop: linear regression onto arange(16) with SGD =="
"$ein" train examples/scripts/linear_regression.ein
echo
echo "== the main job: a byte-level GPT (examples/gpt/byte_gpt.ein) trained on CPU, then a sample =="
log=build/gpt_train.jsonl
"$ein" train examples/gpt/byte_gpt.ein --log "$log" || exit 1
# The README's threshold on the final training loss (nats per byte).
threshold=2.0
final=$(tail -n 1 "$log" | sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/')
if awk -v f="$final" -v t="$threshold" 'BEGIN { exit !(f < t) }'; then
  echo "final loss $final < $threshold: ok"
else
  echo "final loss $final is not below $threshold" >&2
  exit 1
fi
exit 0
