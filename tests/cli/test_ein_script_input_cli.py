#!/usr/bin/env python3
"""`ein run`'s printing of tensors and gradients, and every kind of bad input to `ein check`,
`ein run` and `ein train`, end to end: bad settings, data, devices and checkpoints (exit 1 with
a message that names the cause, never a crash), the bounds on expressions, modules, trace-time
loops and sizes, and files that are FIFOs, corrupt, of another script, unwritable or full.
Helpers and Case come from test_ein_script_cli.py.

Usage: test_ein_script_input_cli.py EIN_BINARY EXAMPLES_DIR

Standard library only; about half a minute on 2 cores.
"""

import ctypes
import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ein_script_cli as cli  # noqa: E402
from test_ein_script_cli import (  # noqa: E402
    LEAKS, TINY, Case, outputs, script, write_safetensors)


class RunPrinting(Case):
    # ein run prints tensors as PyTorch does (every value up to 1000 elements, then the first
    # and last 3 of each long dimension) and, with --grad, the gradients of a scalar fn.
    def test_values_in_full_and_gradients(self):
        src = self.write("f.ein", "fn sq(x: f32[3 4]) -> f32[] = sum(x * x)\n"
                                  "fn big(x: f32[40 40]) = x * 2\n"
                                  "fn twice(x: f32[3]) = x * 2\n")
        x = [0.5 * i - 2 for i in range(12)]
        inputs = self.path("x.safetensors")
        write_safetensors(inputs, {"x": ([3, 4], x)})
        out, _ = self.ok("run", src, "--fn", "sq", "--inputs", inputs, "--grad")
        self.assertAlmostEqual(outputs(out)[0][1][0], sum(v * v for v in x), places=4)
        grad = re.search(r"^grad of input 0: tensor\((.*?), shape=\[3, 4\]", out, re.M | re.S)
        self.assertIsNotNone(grad, out)
        got = [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", grad.group(1))]
        self.assertEqual(got, [2 * v for v in x])
        out, _ = self.ok("run", src, "--fn", "big")
        self.assertIn("...", out)  # 1600 elements: summarised
        self.assertEqual(len(outputs(out)[0][1]), 36)  # 6 rows of 6 shown
        out, _ = self.ok("run", src, "--fn", "twice")
        self.assertEqual(len(outputs(out)[0][1]), 3)
        self.fails(["run", src, "--fn", "twice", "--grad"], "--grad", "one scalar output", "f32[3]")

    # Integers: sums and arithmetic stay exact i64 (past f32's 2^24 and f64's 2^53).
    def test_integer_sum_and_arithmetic(self):
        src = self.write("i.ein", "fn s(x: i64[2 3]) -> i64[2] = sum(x * 1000000000000, 1)\n"
                                  "fn m(x: i64[2 3]) = max(x, 0)\n"
                                  "fn p(x: i64[2 3]) = x ** 3\n"
                                  "fn e(x: i64[2 3]) = einsum(x, x, \"i j, k j -> i k\")\n")
        inputs = self.path("x.safetensors")
        write_safetensors(inputs, {"x": ([2, 3], [1, -2, 3, 4, 5, -6])}, dtype="I64")
        self.ok("check", src)
        out, _ = self.ok("run", src, "--fn", "s", "--inputs", inputs)
        self.assertIn("dtype=i64", out)
        self.assertEqual(outputs(out)[0][1], [2000000000000, 3000000000000])
        out, _ = self.ok("run", src, "--fn", "m", "--inputs", inputs)
        self.assertEqual(outputs(out)[0][1], [4, 5, 3])
        out, _ = self.ok("run", src, "--fn", "p", "--inputs", inputs)
        self.assertIn("output 0: i64[2 3]", out)
        self.assertEqual(outputs(out)[0][1], [1, -8, 27, 64, 125, -216])
        out, _ = self.ok("run", src, "--fn", "e", "--inputs", inputs)  # x xᵀ, exact integers
        self.assertIn("output 0: i64[2 2]", out)
        self.assertEqual(outputs(out)[0][1], [14, -24, -24, 77])

    # Tensor literals and transpose.
    def test_tensor_literals_and_transpose(self):
        src = self.write("t.ein", "fn lit() = transpose(tensor([[1, 2, 3], [4, 5, 6]]) * 2, 0, 1)\n"
                                  "fn half() = tensor([0.5, 1.5], dtype = \"f64\")\n"
                                  "fn bad() = tensor([[1, 2], [3]])\n")
        out, _ = self.ok("run", src, "--fn", "lit")
        self.assertIn("output 0: i64[3 2]", out)
        self.assertEqual(outputs(out)[0][1], [2, 8, 4, 10, 6, 12])
        out, _ = self.ok("run", src, "--fn", "half")
        self.assertIn("dtype=f64", out)
        self.fails(["run", src, "--fn", "bad"], "t.ein:3:19: error: tensor(): the nested lists are not rectangular")

    # x.T reverses every dim (numpy, torch), x.mT swaps the last two, x.ndim counts them.
    def test_transpose_attributes(self):
        src = self.write("tt.ein", "fn t2() = tensor([[1, 2, 3], [4, 5, 6]]).T\n"
                                   "fn t3() = rearrange(arange(24, dtype = \"i64\"), \"(a b c) -> a b c\", a = 2, b = 3).T\n"
                                   "fn m3(x: f32[2 3 4]) -> f32[2 4 3] = x.mT\n"
                                   "fn nd(x: f32[2 3 4]) = x.ndim + x.T.ndim\n"
                                   "fn bad(x: f32[4]) = x.mT\n"
                                   "fn typo(x: f32[4]) = x.t\n")
        out, _ = self.ok("run", src, "--fn", "t2")
        self.assertIn("output 0: i64[3 2]", out)
        self.assertEqual(outputs(out)[0][1], [1, 4, 2, 5, 3, 6])
        out, _ = self.ok("run", src, "--fn", "t3")  # element [k, j, i] of the result is x[i, j, k]
        self.assertIn("output 0: i64[4 3 2]", out)
        x = [[[i * 12 + j * 4 + k for k in range(4)] for j in range(3)] for i in range(2)]
        self.assertEqual(outputs(out)[0][1],
                         [x[i][j][k] for k in range(4) for j in range(3) for i in range(2)])
        out, _ = self.ok("run", src, "--fn", "m3")
        self.assertIn("output 0: f32[2 4 3]", out)
        out, _ = self.ok("run", src, "--fn", "nd")
        self.assertIn("6", out)
        self.fails(["run", src, "--fn", "bad"], "tt.ein:5:21: error: .mT transposes the last two dims")
        self.fails(["run", src, "--fn", "typo"], "has no member 't' (a tensor has shape, ndim, numel, itemsize, nbytes, T and mT)")

    # Slice steps x[a:b:s] (positive, as torch): values, shapes, the gradient, the errors.
    def test_slice_steps(self):
        src = self.write("s.ein", "fn ar() = arange(10, dtype = \"i64\")\n"
                                  "fn evens() = ar()[::2]\n"
                                  "fn mid() = ar()[1:8:3]\n"
                                  "fn empty() = ar()[5:2:2]\n"
                                  "fn grid() = rearrange(arange(24, dtype = \"i64\"), \"(a b) -> a b\", a = 4)[::3, 1::2]\n"
                                  "fn loss(x: f32[7 5]) -> f32[] = sum((x[1::2, ::3] * 2 + 1) ** 2)\n"
                                  "fn back() = ar()[::-1]\n"
                                  "fn zero() = ar()[::0]\n")
        self.assertEqual(outputs(self.ok("run", src, "--fn", "evens")[0])[0], ([5], [0, 2, 4, 6, 8]))
        self.assertEqual(outputs(self.ok("run", src, "--fn", "mid")[0])[0], ([3], [1, 4, 7]))
        self.assertIn("output 0: i64[0]", self.ok("run", src, "--fn", "empty")[0])
        self.assertEqual(outputs(self.ok("run", src, "--fn", "grid")[0])[0],
                         ([2, 3], [1, 3, 5, 19, 21, 23]))
        # d/dx of sum((2 x + 1)²) is 4 (2 x + 1) at rows 1, 3, 5 and columns 0, 3; 0 elsewhere.
        x = [[(r * 5 + c) / 10 - 1.5 for c in range(5)] for r in range(7)]
        inputs = self.path("x.safetensors")
        write_safetensors(inputs, {"x": ([7, 5], [v for row in x for v in row])})
        out, _ = self.ok("run", src, "--fn", "loss", "--grad", "--inputs", inputs)
        m = re.search(r"grad of input 0: tensor\((.*?), shape=\[7, 5\]", out, re.S)
        grad = [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", m.group(1))]
        want = [4 * (2 * x[r][c] + 1) if r % 2 == 1 and c % 3 == 0 else 0
                for r in range(7) for c in range(5)]
        self.assertEqual(len(grad), 35)
        for g, w in zip(grad, want):
            self.assertAlmostEqual(g, w, places=4)
        self.fails(["run", src, "--fn", "back"],
                   "s.ein:7:20: error: a slice step must be positive (got -1), as in torch")
        self.fails(["run", src, "--fn", "zero"], "a slice step must be positive (got 0)")

    # An index out of range is found at run time, from the data: the error points at the
    # indexing expression in `ein run`, `ein run --grad` and `ein train` alike.
    def test_index_out_of_range_at_run_time(self):
        src = self.write("g.ein", "import optim\n"
                                  "fn b(x: f32[4]) = x[tensor([5, 1])]\n"
                                  "fn c(x: f32[4 3]) -> f32[] = sum(x[tensor([1, -9])] ** 2)\n"
                                  "module E(v) {\n"
                                  "  param w: f32[v 2] = normal()\n"
                                  "  fn forward(i: i64[*b]) -> f32[*b 2] = w[i]\n"
                                  "}\n"
                                  "train {\n"
                                  "  model = E(4)\n"
                                  "  optimizer = SGD()\n"
                                  "  steps = 2\n"
                                  "  fn batch() = tensor([0, 7])\n"
                                  "  fn loss(i: i64[2]) -> f32[] = sum(model(i))\n"
                                  "}\n")
        self.fails(["run", src, "--fn", "b"], "g.ein:2:19: error: index 5 at flat position 0 is "
                   "out of range for 4 rows (valid: -4..3)", " fn b(x: f32[4]) = x[tensor([5, 1])]\n"
                   "                   ^~~~~~~~~~~~~~~~~")
        self.fails(["run", src, "--fn", "c", "--grad"], "g.ein:3:34: error: index -9 at flat position 1")
        self.fails(["train", src, "--quiet"], "g.ein:6:41: error: index 7 at flat position 1")

    # max/min over a dim of size 0 has no value: refused where the script asks for it, as
    # torch raises (the kernel alone would return -inf/inf); other reductions of it are defined.
    def test_max_over_an_empty_dim_is_refused(self):
        src = self.write("e.ein", "fn mx(x: f32[n k]) = max(x, 1)\n"
                                  "fn mn(x: f32[n k]) = min(x)\n"
                                  "fn rows(x: f32[n k]) = max(x, 1)\n"
                                  "fn others(x: f32[n k]) = sum(x, 1) + logsumexp(x, 1)\n")
        self.fails(["run", src, "--fn", "mx", "--shape", "3,0"],
                   "e.ein:1:29: error: max() over dim 1 of size 0 has no value (the tensor is "
                   "f32[3 0]); sum() of it is 0 and logsumexp() -inf",
                   " fn mx(x: f32[n k]) = max(x, 1)\n                             ^")
        self.fails(["run", src, "--fn", "mn", "--shape", "2,0"], "e.ein:2:26: error: min() over dim 1 of size 0")
        out, _ = self.ok("run", src, "--fn", "rows", "--shape", "0,3")
        self.assertIn("output 0: f32[0]", out)
        out, _ = self.ok("run", src, "--fn", "others", "--shape", "2,0")
        self.assertIn("tensor([-inf, -inf]", out)

    # pick, triu and tril compare indices in the kernel's compute type: f32 is exact only up
    # to 2^24, so wider f32 dims are refused (they would pick a neighbour); f64 is exact.
    def test_indices_beyond_f32_are_refused_or_exact(self):
        src = self.write("w.ein", "fn row(dtype) = rearrange(arange(16777219, dtype = dtype), \"(r n) -> r n\", r = 1)\n"
                                  "fn f32pick() = pick(row(\"f32\"), tensor([16777217]))\n"
                                  "fn f64pick() = pick(row(\"f64\"), tensor([16777217]))\n"
                                  "fn wide() = triu(zeros(2, 16777217))\n")
        self.fails(["run", src, "--fn", "f32pick"], "w.ein:2:21: error: pick() over 16777219 classes: "
                   "a f32 x compares class indices in f32, exact only up to 2^24 = 16777216; pick from f64(x)")
        out, _ = self.ok("run", src, "--fn", "f64pick")
        self.assertIn("tensor([16777217.]", out)
        self.fails(["run", src, "--fn", "wide"], "w.ein:4:18: error: triu() of a f32 tensor with a dim "
                   "over 2^24 = 16777216 (2 x 16777217)")

    # The lecture's memory facts and dtype limits: x.nbytes, x.itemsize, finfo, iinfo.
    def test_memory_attributes_and_dtype_limits(self):
        src = self.write("m.ein", "fn mem() = zeros(4, 8).nbytes\n"
                                  "fn gpt3() = zeros(12288 * 4, 12288).nbytes / (1024 * 1024)\n"
                                  "fn sizes() = tensor([zeros(4, 8, dtype = \"f16\").itemsize, "
                                  "zeros(4, 8, dtype = \"bf16\").itemsize, zeros(3, 5).numel])\n"
                                  "fn limits() = tensor([finfo(\"f32\").eps, finfo(\"f16\").max, "
                                  "finfo(\"bf16\").tiny, finfo(\"f16\").smallest_subnormal, "
                                  "iinfo(\"i8\").min, iinfo(\"u8\").max, finfo(\"bf16\").bits], dtype = \"f64\")\n"
                                  "fn tiny() = cat([f32(f16(tensor([1e-8]))), f32(bf16(tensor([1e-8])))])\n"
                                  "fn bad_member() = finfo(\"f32\").epsilon\n"
                                  "fn bad_dtype() = finfo(\"i8\")\n")
        out, _ = self.ok("run", src, "--fn", "mem")
        self.assertEqual(outputs(out)[0][1], [128])  # 4 · 8 float32 values of 4 bytes
        out, _ = self.ok("run", src, "--fn", "gpt3")
        self.assertEqual(outputs(out)[0][1], [2304])  # MiB: GPT-3's feed-forward matrix
        out, _ = self.ok("run", src, "--fn", "sizes")
        self.assertEqual(outputs(out)[0][1], [2, 2, 15])
        out, _ = self.ok("run", src, "--fn", "limits")
        want = [2.0 ** -23, 65504, 2.0 ** -126, 2.0 ** -24, -128, 255, 16]
        for got, w in zip(outputs(out)[0][1], want):
            self.assertAlmostEqual(got / w, 1, places=5)
        out, _ = self.ok("run", src, "--fn", "tiny")  # 1e-8 underflows in f16, not in bf16
        f16, bf16 = outputs(out)[0][1]
        self.assertEqual(f16, 0)
        self.assertAlmostEqual(bf16 / 1e-8, 1, places=2)
        self.fails(["run", src, "--fn", "bad_member"],
                   "m.ein:6:19: error: finfo(f32) has no member 'epsilon' (members: bits, eps, max")
        self.fails(["run", src, "--fn", "bad_dtype"],
                   "m.ein:7:24: error: finfo(): 'i8' is not a floating dtype")

    # randint(low, high, sizes...): integers in [low, high), fresh per call and per seed.
    def test_randint(self):
        src = self.write("r.ein", "fn r() = randint(-3, 7, 500)\n"
                                  "fn two() = randint(0, 1000, 8) - randint(0, 1000, 8)\n"
                                  "fn small() = randint(0, 4, 2, 3, dtype = \"i8\")\n"
                                  "fn empty() = randint(3, 3, 2)\n"
                                  "fn float() = randint(0, 3, 2, dtype = \"f32\")\n")
        out, _ = self.ok("run", src, "--fn", "r")
        self.assertIn("output 0: i64[500]", out)
        values = outputs(out)[0][1]
        self.assertEqual(sorted(set(values)), list(range(-3, 7)))  # every value, none outside
        again, _ = self.ok("run", src, "--fn", "r")
        self.assertEqual(outputs(again)[0][1], values)  # the same --seed, the same numbers
        other, _ = self.ok("run", src, "--fn", "r", "--seed", "1")
        self.assertNotEqual(outputs(other)[0][1], values)
        out, _ = self.ok("run", src, "--fn", "two")  # two calls in one function differ
        self.assertTrue(any(v != 0 for v in outputs(out)[0][1]))
        out, _ = self.ok("run", src, "--fn", "small")
        self.assertIn("output 0: i8[2 3]", out)
        self.fails(["run", src, "--fn", "empty"], "r.ein:4:25: error: randint(): low (3) must be below high (3)")
        self.fails(["run", src, "--fn", "float"], "randint()'s dtype must name an integer dtype")

    # The lecture's Q8_0 quantization: q = i8(round(x / scale)), half to even, dequantized.
    def test_q8_0_quantization(self):
        src = self.write("q.ein", "fn quantize(x: f32[8]) -> i8[8] = i8(round(x / 0.5))\n"
                                  "fn roundtrip(x: f32[8]) -> f32[8] = f32(i8(round(x / 0.5))) * 0.5\n")
        x = [0.25, 0.75, -0.25, -0.75, 1.3, -63.4, 10.0, 0.0]
        inputs = self.path("x.safetensors")
        write_safetensors(inputs, {"x": ([8], x)})
        out, _ = self.ok("run", src, "--fn", "quantize", "--inputs", inputs)
        self.assertIn("dtype=i8", out)
        self.assertEqual(outputs(out)[0][1], [0, 2, -0, -2, 3, -127, 20, 0])
        out, _ = self.ok("run", src, "--fn", "roundtrip", "--inputs", inputs)
        self.assertEqual(outputs(out)[0][1], [0, 1, 0, -1, 1.5, -63.5, 10, 0])


class Errors(Case):
    def test_bad_settings(self):
        gpt = script("gpt", "byte_gpt.ein")
        self.fails(["train", gpt, "--set", "D=abc", "--steps", "1"], "D=abc", "not a number")
        self.fails(["train", gpt, "--set", "D=0", "--steps", "1"], "D=0", "positive integer")
        err = self.fails(["train", gpt, "--set", "NOPE=3", "--steps", "1"], "NOPE")
        for name in ("V", "T", "L", "H", "D", "B", "lr"):
            self.assertRegex(err, r"\b%s\b" % name)
        self.fails(["check", gpt, "--set", "NOPE=3"], "NOPE")

    def test_missing_data_and_cuda(self):
        gpt = script("gpt", "byte_gpt.ein")
        self.fails(["train", gpt, *TINY, "--steps", "1", "--data", "/nonexistent"],
                   "/nonexistent", "does not exist")
        # The script's own data file: the error points at its `data = ...` with a caret.
        src = self.write("d.ein", "import gpt\nimport optim\ntrain {\n"
                                  "  model = GPT(256, 8, 1, 2, 16)\n"
                                  "  data = bytes(\"missing.txt\", batch = 2, context = 8)\n"
                                  "  optimizer = SGD()\n"
                                  "  fn loss(x: i64[2 8], y: i64[2 8]) -> f32[] = cross_entropy(model(x), y)\n"
                                  "}\n")
        self.fails(["train", src, "--steps", "1"], "d.ein:5:10: error: data file '",
                   "missing.txt' does not exist (set by the train block's data; --data overrides it)",
                   '   data = bytes("missing.txt", batch = 2, context = 8)\n'
                   "          ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~")
        os.mkfifo(self.path("missing.txt"))  # a FIFO would block: refused, at the same place
        self.fails(["train", src, "--steps", "1"], "d.ein:5:10: error: data file '",
                   "is not a regular file but a FIFO")
        self.fails(["train", gpt, *TINY, "--steps", "1", "--device", "tpu"], "--device tpu",
                   "expected auto, cpu, cuda or cuda:N")
        try:
            ctypes.CDLL("libcuda.so.1")
            has_driver = True
        except OSError:
            has_driver = False
        if has_driver:  # the same command trains on the GPU
            self.ok("train", gpt, *TINY, "--steps", "1", "--device", "cuda", "--quiet")
        else:  # the driver's reason, not a crash
            self.fails(["train", gpt, *TINY, "--steps", "1", "--device", "cuda"], "--device cuda",
                       "libcuda.so.1")

    def test_resume_onto_another_size(self):
        gpt, ck = script("gpt", "byte_gpt.ein"), self.path("ck")
        self.ok("train", gpt, *TINY, "--steps", "1", "--checkpoint", ck, "--quiet")
        err = self.fails(["train", gpt, *TINY, "--set", "D=64", "--steps", "2", "--resume",
                          "--checkpoint", ck, "--quiet"], "cannot resume from", "step_1")
        self.assertIn("'model.wte.weight' is f32 [256, 32] in the checkpoint but f32 [256, 64] here",
                      err)

    def test_init_missing_tensors(self):
        ck = self.path("ck")
        self.ok("train", script("scripts", "linear_regression.ein"), "--steps", "1",
                "--checkpoint", ck, "--quiet")
        init = os.path.join(ck, "step_1.safetensors")  # names carry "model.": none fits
        self.fails(["train", script("gpt", "byte_gpt.ein"), *TINY, "--steps", "1", "--init", init],
                   "--init", "'wte.weight' is missing")
        self.fails(["train", script("gpt", "byte_gpt.ein"), *TINY, "--steps", "1", "--init",
                    self.path("none.safetensors")], "--init", "none.safetensors")

    def test_init_from_own_checkpoint_and_misspelt_setting(self):
        ck = self.path("ck")
        lr = script("scripts", "linear_regression.ein")
        self.ok("train", lr, "--steps", "300", "--checkpoint", ck, "--quiet")
        # An ein train checkpoint ("model." names) initialises a new run: it starts converged.
        log = self.path("log.jsonl")
        self.ok("train", lr, "--steps", "1", "--init", os.path.join(ck, "step_300.safetensors"),
                "--log", log, "--quiet")
        with open(log) as f:
            self.assertLess(json.loads(f.readline())["loss"], 1e-4)
        def linear_train(name, setting, fn_name):
            """A small train block with `setting` (a line, or "") and its loss fn named fn_name."""
            path = self.path(name)
            with open(path, "w") as f:
                f.write("import nn\nimport optim\ndim D = 4\ntrain {\n  model = Linear(D, 1)\n"
                        "  optimizer = SGD()\n" + setting +
                        "  fn batch() = (randn(2, D), randn(2, 1))\n"
                        f"  fn {fn_name}(x: f32[b D], y: f32[b 1]) -> f32[] = "
                        "mean((model(x) - y) ** 2)\n}\n")
            return path

        typo = linear_train("typo.ein", "  stesp = 6\n", "loss")
        self.fails(["train", typo], typo + ":7:3: error:", "'stesp' is not a train setting")
        # A function that takes a setting's name (found by fuzzing: it had no value to point
        # at, and `ein check` read through a null pointer): the caret goes under its name.
        clash = linear_train("clash.ein", "", "clip")
        self.fails(["check", clash], clash + ":8:6: error:",
                   "train setting 'clip' must be a number >= 0, got")

    def test_syntax_error(self):
        bad = self.path("bad.ein")
        with open(bad, "w") as f:
            f.write("dim D = 4\nfn f(x: f32[D]) -> f32[D] = x +* 2\n")
        err = self.fails(["check", bad], bad + ":2:32: error:", "expected an expression")
        lines = err.splitlines()
        self.assertIn(" fn f(x: f32[D]) -> f32[D] = x +* 2", lines)
        caret = lines[lines.index(" fn f(x: f32[D]) -> f32[D] = x +* 2") + 1]
        self.assertEqual(caret, " " * 32 + "^")

    def test_shape_mismatch_points_at_call_and_declaration(self):
        src = self.path("shape.ein")
        with open(src, "w") as f:
            f.write("import optim\n"
                    "module M(n) {\n"
                    "  param w: f32[n n] = zeros()\n"
                    "  fn forward(x: f32[b n]) -> f32[b n] = x @ w\n"
                    "}\n"
                    "dim B = 2\n"
                    "train {\n"
                    "  model = M(4)\n"
                    "  optimizer = SGD(lr = 0.1)\n"
                    "  steps = 1\n"
                    "  fn loss(x: f32[B 3]) -> f32[] = mean(model(x))\n"
                    "}\n")
        err = self.fails(["check", src], src + ":11:", "error:", "M.forward",
                         src + ":4:", "note:", "f32[b n]")
        lines = err.splitlines()
        call = "   fn loss(x: f32[B 3]) -> f32[] = mean(model(x))"
        decl = "   fn forward(x: f32[b n]) -> f32[b n] = x @ w"
        self.assertIn(call, lines)
        self.assertIn(decl, lines)
        # The first caret under the call's argument x, the second under the declaration.
        caret = lines[lines.index(call) + 1]
        self.assertEqual(caret.rstrip(), " " * call.index("(x))") + " ^")
        caret = lines[lines.index(decl) + 1]
        self.assertEqual(caret.strip(), "^")
        self.assertIn(decl[caret.index("^")], "bn[")
        self.assertLess(err.index(":11:"), err.index(":4:"))


class Limits(Case):
    """Bad input ends in a located error (exit 1), never a crash: the limits of dsl/limits.h
    and the size checks of the interpreter."""

    def test_long_chain_is_refused_by_the_parser(self):
        src = self.write("chain.ein", "let c = " + " + ".join(["1"] * 3600) + "\n")
        self.fails(["check", src], src + ":1:4007: error: the expression nests deeper than 1000 "
                   "levels (each operator of a chain such as a + b + c, each call and each "
                   "subscript adds one): split it with intermediate names")
        # A chain at the limit is evaluated and traced.
        ok = self.write("ok.ein", "let c = " + " + ".join(["1"] * 1000) + "\n"
                        "fn f(x: f32[4]) -> f32[4] = " + " + ".join(["x"] * 1000) + "\n")
        self.ok("check", ok)
        self.ok("run", ok)

    def test_recursive_modules_are_refused(self):
        src = self.write("rec.ein", "module R(d) {\n  inner = R(d)\n}\nlet m = R(4)\n")
        self.fails(["check", src], src + ":2:11: error: module constructions nest deeper than "
                   "256 (does R construct itself, directly or through another module?)")
        src = self.write("mutual.ein", "module A(d) {\n  b = B(d)\n}\nmodule B(d) {\n"
                         "  a = A(d)\n}\ntrain {\n  model = A(4)\n}\n")
        self.fails(["check", src], src + ":5:7: error: module constructions nest deeper than 256")
        src = self.write("fn.ein", "fn f(x) = f(x)\nlet y = f(1)\n")
        self.fails(["check", src], src + ":1:11: error: calls nest deeper than 256 "
                   "(recursion in f?)")
        a = self.write("a.ein", 'import "b.ein"\n')
        b = self.write("b.ein", 'import "a.ein"\n')
        self.fails(["check", a], b + ":1:8: error: import cycle: '" + a + "' imports itself")

    def test_trace_time_loops_are_bounded(self):
        body = ("import optim\nmodule M() {\n  param w: f32[4] = zeros()\n"
                "  fn forward(x: f32[4]) -> f32[4] {\n    y = x\n%s    return y\n  }\n}\n"
                "train {\n  model = M()\n  optimizer = SGD(lr = 0.1)\n  steps = 1\n"
                "  fn batch() = randn(4)\n  fn loss(x: f32[4]) -> f32[] = sum(model(x))\n}\n")
        src = self.write("loop.ein", body % "    for i in 0..1000000000 {\n      y = y + w\n    }\n")
        self.fails(["check", src], src + ":6:14: error: this loop would run 1000000000 times, "
                   "but loops are unrolled while tracing and may run at most 10000 iterations "
                   "in all")
        src = self.write("nested.ein", body % ("    for i in 0..1000 {\n      for j in 0..1000 {\n"
                                               "        y = y + w\n      }\n    }\n"))
        self.fails(["check", src], src + ":7:16: error: this loop would run 1000 times, but "
                   "loops are unrolled while tracing and may run at most 10000 iterations in "
                   "all (9010 already run)")  # the 10 outer iterations count too
        src = self.write("list.ein", body % ("    l = [1]\n    for i in 0..40 {\n      l = l + l\n"
                                             "    }\n"))
        self.fails(["check", src], src + ":8:11: error: '+' would make a list of 1048576 items, "
                   "more than the 1000000 a script may build")

    def test_sizes_beyond_int64(self):
        src = self.write("dim.ein", "dim N = 1e19\n")
        self.fails(["check", src], src + ":1:9: error: dim N must be a positive integer below "
                   "2^63 (9223372036854775808), got 1e+19")
        src = self.write("set.ein", "dim N = 4\n")
        self.fails(["check", src, "--set", "N=1e19"], "--set N=1e19: the dim N needs a positive "
                   "integer below 2^63 (9223372036854775808), got 1e+19")
        src = self.write("param.ein", "import optim\ndim A = 1e7\nmodule M() {\n"
                         "  param w: f32[A A A A] = zeros()\n}\ntrain {\n  model = M()\n}\n")
        self.fails(["check", src], src + ":4:12: error: parameter 'w' is f32 [10000000, 10000000, "
                   "10000000, 10000000]: more elements than a 64-bit count holds (2^63 - 1)")
        src = self.write("input.ein", "dim A = 1e7\nfn f(x: f32[A A A A]) -> f32[] = sum(x)\n")
        self.fails(["check", src], src + ":2:9: error: the example input 'x' is f32 [10000000, "
                   "10000000, 10000000, 10000000]: more elements than a 64-bit count holds")
        src = self.write("ones.ein", "fn f() -> f32[] = sum(ones(1e7, 1e7, 1e7))\n")
        self.fails(["check", src], src + ":1:23: error: this tensor is f32 [10000000, 10000000, "
                   "10000000]: more elements than a 64-bit count holds (2^63 - 1)")

    def test_allocation_beyond_memory_is_refused_before_running(self):
        src = self.write("big.ein", "fn f() -> f32[] = sum(ones(1e5, 1e5, 1e5))\n")
        start = time.monotonic()
        err = self.fails(["run", src], src + ":1:23: error: this tensor is f32 [100000, 100000, "
                         "100000]: 4000000000000000 bytes (3.6 PiB), more than the ",
                         " of memory on cpu")
        self.assertLess(time.monotonic() - start, 20, err)
        self.assertIn(" sum(ones(1e5, 1e5, 1e5))", err)

    # arange is made when the function runs: `ein check` traces x @ arange(D) at D = 10^12
    # (8 TB) without allocating it (the fuzzer's timeout at D = 79,049,498), and a run refuses
    # it before allocating, with the caret under the call.
    def test_arange_is_not_made_by_a_check(self):
        src = self.write("ar.ein", "dim D = 1e12\nfn f(x: f32[2 D]) -> f32[2] = x @ arange(D)\n"
                                   "fn g() -> f32[] = sum(arange(D))\n")
        start = time.monotonic()
        out, _ = self.ok("check", src)
        self.assertIn("ok (2 functions checked", out)
        self.assertLess(time.monotonic() - start, 20)
        self.fails(["run", src, "--fn", "g"], src + ":3:23: error: this tensor is f32 [1000000000000]: "
                   "4000000000000 bytes (3.6 TiB), more than the ", " of memory on cpu")


class Files(Case):
    """Files where ein expects regular files, checkpoints' checksums and identity, and write
    errors: each fails at once with a message naming the path, never hangs or loses data."""

    LR = "linear_regression.ein"

    def lr(self):
        return script("scripts", self.LR)

    def test_fifo_as_init_is_refused_without_hanging(self):
        os.mkfifo(self.path("f"))
        self.fails(["train", self.lr(), "--steps", "1", "--init", self.path("f")],
                   "--init", self.path("f"), "not a regular file but a FIFO")

    def test_latest_as_fifo_or_dev_zero_is_skipped(self):
        ck = self.path("ck")
        self.ok("train", self.lr(), "--steps", "2", "--checkpoint", ck, "--quiet")
        os.remove(os.path.join(ck, "latest"))
        os.mkfifo(os.path.join(ck, "latest"))
        _, err = self.ok("train", self.lr(), "--steps", "3", "--checkpoint", ck, "--resume",
                         "--quiet")
        self.assertIn("latest: it is a FIFO", err)
        self.assertIn("(step 2)", err)
        os.remove(os.path.join(ck, "latest"))
        os.symlink("/dev/zero", os.path.join(ck, "latest"))
        _, err = self.ok("train", self.lr(), "--steps", "4", "--checkpoint", ck, "--resume",
                         "--quiet")
        self.assertIn("latest: it is a character device", err)
        self.assertIn("(step 3)", err)
        for leak in LEAKS:
            self.assertNotIn(leak, err)

    def test_flipped_byte_falls_back_on_resume_and_fails_init(self):
        ck = self.path("ck")
        self.ok("train", self.lr(), "--steps", "2", "--checkpoint", ck, "--quiet")
        self.ok("train", self.lr(), "--steps", "4", "--checkpoint", ck, "--resume", "--quiet")
        newest = os.path.join(ck, "step_4.safetensors")
        with open(newest, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            b = f.read(1)
            f.seek(-3, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x40]))
        _, err = self.ok("train", self.lr(), "--steps", "5", "--checkpoint", ck, "--resume",
                         "--quiet")
        self.assertIn("warning: skipped " + newest, err)
        self.assertIn("does not match its checksum", err)
        self.assertIn("resumed from " + os.path.join(ck, "step_2.safetensors"), err)
        self.fails(["train", self.lr(), "--steps", "1", "--init", newest],
                   "--init", newest, "does not match its checksum")

    def test_checkpoint_of_another_script_is_refused(self):
        ck = self.path("ck")
        self.ok("train", self.lr(), "--steps", "2", "--checkpoint", ck, "--quiet")
        self.fails(["train", script("scripts", "cruncher.ein"), "--steps", "3", "--checkpoint",
                    ck, "--resume", "--quiet"],
                   "checkpoint of another model", self.LR,
                   "'model.layers.0.weight' is missing from the checkpoint")

    def test_unwritable_checkpoint_dir_fails_before_training(self):
        with open(self.path("file"), "w") as f:
            f.write("x")
        log = self.path("log.jsonl")
        self.fails(["train", self.lr(), "--steps", "2", "--checkpoint", self.path("file", "ck"),
                    "--log", log, "--quiet"],
                   "cannot write checkpoints to '" + self.path("file", "ck") + "'")
        self.assertFalse(os.path.exists(log) and os.path.getsize(log) > 0)  # no step ran

    @unittest.skipUnless(os.path.exists("/dev/full"), "no /dev/full")
    def test_log_write_error_is_an_error(self):
        self.fails(["train", self.lr(), "--steps", "2", "--log", "/dev/full", "--quiet"],
                   "--log /dev/full", "No space left on device")


def main():
    cli.EIN, cli.EXAMPLES = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=1)


if __name__ == "__main__":
    main()
