#!/usr/bin/env python3
"""`ein emit` end to end: the softmax listing against its golden file (the same text the C++
golden test checks), kernel counts of the standard functions forward and backward, the three
stages, map expressions and reduce patterns, and the exit codes (0 ok, 1 a bad input, 2 a
usage error) without C++ internals in the messages.

Usage: test_ein_emit_cli.py EIN_BINARY GOLDEN_DIR

Standard library only.
"""

import os
import re
import subprocess
import sys
import unittest

EIN = None  # set from argv in main()
GOLDEN = None
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped")


def ein(*args):
    p = subprocess.run([EIN, "emit", *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def kernels(listing):
    m = re.match(r"fused .*?: (\d+) kernels?, (\d+) nodes? left as is", listing)
    assert m, listing
    return int(m.group(1))


class Stages(unittest.TestCase):
    def test_softmax_fused_golden(self):
        rc, out, err = ein("softmax", "--shape", "64,1024,512", "--stage", "fused")
        self.assertEqual((rc, err), (0, ""))
        with open(os.path.join(GOLDEN, "softmax_fused.txt")) as f:
            self.assertEqual(out, f.read())

    def test_forward_kernel_counts(self):
        want = {"softmax": 1, "log_softmax": 1, "layer_norm": 1, "rms_norm": 1,
                "cross_entropy": 1, "mse_loss": 1, "adamw": 1}
        for name, count in want.items():
            rc, out, _ = ein(name, "--shape", "16,128")
            self.assertEqual(rc, 0, name)
            self.assertEqual(kernels(out), count, name + "\n" + out)

    def test_backward_at_most_two_kernels(self):
        for name in ("softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy",
                     "mse_loss"):
            rc, out, err = ein(name, "--shape", "16,128", "--backward")
            self.assertEqual(rc, 0, name + err)
            self.assertTrue(out.startswith("fused backward of " + name), out)
            self.assertLessEqual(kernels(out), 2, name + "\n" + out)

    def test_ir_and_mlir(self):
        rc, out, _ = ein("rms_norm", "--shape", "4,32", "--stage", "ir")
        self.assertEqual(rc, 0)
        self.assertIn("reduce[mean dims 1]", out)
        self.assertNotIn("fused", out)
        rc, out, _ = ein("softmax", "--shape", "4,32", "--stage", "kernels")
        self.assertEqual(rc, 0)
        self.assertIn("stage0 = max", out)
        self.assertIn("stage1 = sum", out)
        rc, out, _ = ein("layer_norm", "--shape", "4,32", "--stage", "mlir")
        self.assertEqual(rc, 0)
        self.assertEqual(out.count("func.func @"), 1)
        self.assertIn("// kernel 1", out)

    def test_map_expression_and_reduce_pattern(self):
        rc, out, _ = ein("x[b s d], m[b s] -> (x - m)**2", "--shape", "4,8,16", "--shape", "4,8")
        self.assertEqual(rc, 0)
        self.assertEqual(kernels(out), 1)
        self.assertIn("= (%0 - %1) ** 2", out)
        rc, out, _ = ein("a (b c) -> c a", "--reduction", "var", "--ddof", "1", "--shape", "4,30",
                         "--size", "b=6")
        self.assertEqual(rc, 0, out)
        self.assertEqual(kernels(out), 1)
        self.assertIn("(folded into the strides)", out)

    def test_einsum_rearrange_and_repeat_patterns(self):
        # Without --reduction a pattern is what ein::compile makes of it: einsum, rearrange, repeat.
        rc, out, err = ein("b s d, d f -> b s f", "--shape", "4,8,16", "--shape", "16,32",
                           "--stage", "cost")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"contract +f32\[4, 8, 32\] +32768 +32768")
        rc, out, err = ein("b s (h d) -> b h s d", "--shape", "2,8,64", "--size", "h=4",
                           "--stage", "ir")
        self.assertEqual(rc, 0, err)
        self.assertIn("f32[2, 4, 8, 16]", out)
        rc, out, err = ein("b d -> b d r", "--shape", "2,4", "--size", "r=3", "--stage", "ir")
        self.assertEqual(rc, 0, err)
        self.assertIn("f32[2, 4, 3]", out)

    def test_adamw_is_one_kernel_with_three_stores(self):
        rc, out, _ = ein("adamw", "--shape", "1000")
        self.assertEqual(rc, 0)
        self.assertIn("3 stores", out)
        self.assertIn("0 nodes left as is", out)


class Targets(unittest.TestCase):
    def test_cuda_source_per_kernel(self):
        rc, out, err = ein("softmax", "--shape", "64,1000", "--dtype", "bf16", "--target", "cuda")
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out.count("__global__ void"), 1)
        self.assertIn("// kernel 1 (%1), contiguous inputs: ein_fused_max_exp_sub_sum_div, "
                      "row_warp, grid 8 x block 256", out)
        self.assertIn("#include <cuda_bf16.h>", out)
        self.assertIn("ein_warp_reduce(", out)
        rc2, out2, _ = ein("softmax", "--shape", "64,1000", "--dtype", "bf16", "--stage", "cuda")
        self.assertEqual((rc2, out2), (0, out))
        # LayerNorm's backward: a row kernel and a column kernel.
        rc, out, _ = ein("layer_norm", "--shape", "32,768", "--backward", "--target", "cuda")
        self.assertEqual(rc, 0)
        self.assertEqual(out.count("__global__ void"), 2)
        self.assertIn(", column, grid", out)
        # Over 2048 rows the column kernel runs as two (compiler/kernel/split_rows.h).
        rc, out, _ = ein("layer_norm", "--shape", "2048,512", "--backward", "--target", "cuda")
        self.assertEqual(rc, 0)
        self.assertEqual(out.count("__global__ void"), 3)
        self.assertIn("a column reduction over 2048 rows, run as two kernels: its rows in 64 chunks",
                      out)
        self.assertIn("_row_chunks, column, grid 128 x block 256", out)
        self.assertIn("_combine_chunks, column, grid 2 x block 256", out)

    def test_mlir_target_is_the_mlir_stage(self):
        rc, out, _ = ein("layer_norm", "--shape", "4,32", "--target", "mlir")
        self.assertEqual(rc, 0)
        self.assertEqual(out, ein("layer_norm", "--shape", "4,32", "--stage", "mlir")[1])

    def test_trailing_axis_sizes(self):
        rc, out, err = ein("a (b c) -> c a", "--reduction", "sum", "--shape", "4,30",
                           "--target", "cuda", "b=6")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("__global__ void", out)
        self.assertIn("// origin:   a (b c) -> c a", out)


class Errors(unittest.TestCase):
    def test_cost_stage(self):
        # einsum-free graphs have no matmul FLOPs; the convention is printed with the numbers.
        rc, out, _ = ein("softmax", "--shape", "4,8", "--stage", "cost")
        self.assertEqual(rc, 0)
        self.assertIn("FLOPs: 2 per multiply-add", out)
        self.assertRegex(out, r"total\s+\d+")
        # LayerNorm's backward with weight and bias as weights: both parts are nonzero.
        rc, out, _ = ein("layer_norm", "--shape", "4,8", "--backward", "--weight", "1",
                         "--weight", "2", "--stage", "cost")
        self.assertEqual(rc, 0, out)
        grads = dict(re.findall(r"(input|weight) gradients\s+(\d+) FLOPs", out))
        self.assertGreater(int(grads["input"]), 0, out)
        self.assertGreater(int(grads["weight"]), 0, out)
        self.assertIn("saved for backward", out)

    def check(self, args, code, text):
        rc, out, err = ein(*args)
        self.assertEqual(rc, code, err)
        self.assertEqual(out, "")
        self.assertIn(text, err)
        for leak in LEAKS:
            self.assertNotIn(leak, err)

    def test_usage_errors(self):
        self.check(["softmaxx", "--shape", "4,8"], 2, "is not a standard function")
        self.check(["softmax", "--shape", "4,8", "--stage", "ptx"], 2, "--stage ptx")
        self.check(["softmax", "--shape", "4,8", "--target", "ptx"], 2, "--target ptx")
        self.check(["softmax", "--shape", "4,8", "--target", "cuda", "--stage", "kernels"], 2,
                   "cannot be combined with --stage")
        self.check(["b n -> b", "--reduction", "sum", "--shape", "4,8", "--shape", "4"], 2,
                   "a reduce pattern takes one --shape")
        self.check(["softmax", "--shape", "4,8", "--dtype", "i64"], 2, "--dtype i64")
        self.check(["softmax", "--shape", "4,8", "--backward", "--weight", "3", "--stage", "cost"],
                   2, "--weight 3")

    def test_input_errors(self):
        self.check(["x[b n], m[b] -> x - m", "--shape", "4,8", "--shape", "5"], 1,
                   "axis 'b' has length 5 here but 4 earlier")
        self.check(["x[b n] -> frob(x)", "--shape", "4,8"], 1, "unknown function 'frob'")
        self.check(["cross_entropy", "--shape", "4,8,2"], 1, "cross_entropy takes logits")


def main():
    global EIN, GOLDEN
    EIN, GOLDEN = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=1)


if __name__ == "__main__":
    main()
