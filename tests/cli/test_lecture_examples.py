"""The lecture series of examples/lecture/ end to end: every script runs as its header says,
and prints the lecture's numbers (its notebook's asserts, and the FLOP and memory counts it
derives). ctest cli.lecture_examples.

Usage: test_lecture_examples.py EIN_BINARY EXAMPLES_DIR

Standard library only; about 10 s on 2 cores.
"""

import json
import os
import re
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ein_script_cli as cli  # noqa: E402  (its Case: a scratch folder per test)
from test_ein_script_cli import outputs, write_safetensors  # noqa: E402

EIN = None       # set from argv in main()
LECTURE = None   # examples/lecture


class Lecture(cli.Case):
    def ein(self, *args):
        p = subprocess.run([EIN, *args], capture_output=True, text=True, timeout=300,
                           cwd=self.tmp)
        self.assertEqual(p.returncode, 0, " ".join(args) + "\n" + p.stderr)
        return p.stdout

    def script(self, name):
        return os.path.join(LECTURE, name)

    def run_fn(self, name, fn, *args):
        """(shape, values) of output 0 of `ein run SCRIPT --fn FN`."""
        out = self.ein("run", self.script(name), "--fn", fn, *args)
        return outputs(out)[0]

    def cost_total(self, *args):
        """(FLOPs, matmul FLOPs) of the "total" row of `ein emit ... --stage cost`."""
        out = self.ein("emit", *args, "--stage", "cost")
        m = re.search(r"^\s+total\s+(\d+)\s+(\d+)", out, re.M)
        self.assertIsNotNone(m, out)
        return int(m.group(1)), int(m.group(2))

    def log(self, path):
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    # tensors_memory
    def test_01_tensors_memory(self):
        f = "01_tensors_memory.ein"
        self.assertEqual(self.run_fn(f, "fp32_bytes")[1], [4 * 8 * 4])
        self.assertEqual(self.run_fn(f, "gpt3_matrix_mib")[1], [2304])
        self.assertEqual(self.run_fn(f, "bytes_per_value")[1], [4, 2, 2, 1])
        f16, bf16 = self.run_fn(f, "underflow")[1]
        self.assertEqual(f16, 0)  # torch: x == 0 in float16
        self.assertAlmostEqual(bf16 / 1e-8, 1, places=2)  # x != 0 in bfloat16
        shape, v = self.run_fn(f, "dynamic_range")
        self.assertEqual(shape, [5, 3])
        want = [[3.40282e38, 2.0 ** -126, 2.0 ** -23],     # torch.finfo(torch.float32)
                [65504, 2.0 ** -14, 2.0 ** -10],           # float16
                [3.38953e38, 2.0 ** -126, 2.0 ** -7],      # bfloat16
                [448, 2.0 ** -6, 2.0 ** -3],               # float8_e4m3fn: [-448, 448]
                [57344, 2.0 ** -14, 2.0 ** -2]]            # float8_e5m2: [-57344, 57344]
        for got, w in zip(v, [x for row in want for x in row]):
            self.assertAlmostEqual(got / w, 1, places=4)

    # tensor_storage, tensor_slicing, tensor_elementwise, tensor_matmul
    def test_02_tensor_operations(self):
        f = "02_tensor_operations.ein"
        self.assertEqual(self.run_fn(f, "row0"), ([3], [1, 2, 3]))
        self.assertEqual(self.run_fn(f, "column1"), ([2], [2, 5]))
        self.assertEqual(self.run_fn(f, "as_3x2"), ([3, 2], [1, 2, 3, 4, 5, 6]))
        self.assertEqual(self.run_fn(f, "transposed"), ([3, 2], [1, 4, 2, 5, 3, 6]))
        shape, v = self.run_fn(f, "elementwise")
        self.assertEqual(shape, [6, 3])
        want = [1, 16, 81, 1, 2, 3, 1, 1 / 2, 1 / 3, 2, 8, 18, 2, 8, 18, 2, 8, 18]
        for got, w in zip(v, want):
            self.assertAlmostEqual(got, w, places=5)
        self.assertEqual(self.run_fn(f, "causal"), ([3, 3], [1, 1, 1, 0, 1, 1, 0, 0, 1]))
        self.assertIn("ok (9 functions checked)", self.ein("check", self.script(f)))
        # A transpose is a view: the graph holds no copy.
        ir = self.ein("emit", self.script(f), "--fn", "transposed", "--stage", "ir")
        self.assertNotIn("copy", ir)

    # einops_einsum, einops_reduce, einops_rearrange
    def test_03_einops(self):
        f = "03_einops.ein"
        self.assertIn("ok (8 functions checked)", self.ein("check", self.script(f)))
        self.assertEqual(self.run_fn(f, "scores"), ([2, 3, 3], [4.0] * 18))
        self.assertEqual(self.run_fn(f, "reduce_hidden"), ([2, 3], [4.0] * 6))
        self.assertEqual(self.run_fn(f, "heads"), ([2, 3, 8], [4.0] * 48))
        # einsum and x @ y.transpose(-2, -1) agree on random inputs.
        a = self.ein("run", self.script(f), "--fn", "old_way", "--seed", "3")
        b = self.ein("run", self.script(f), "--fn", "new_way", "--shape", "2,3,4",
                     "--shape", "2,3,4", "--seed", "3")
        self.assertEqual(outputs(a)[0], outputs(b)[0])

    # tensor_operations_flops: 2·B·D·K for x @ w, m·n for x + y; MFU in the training log
    def test_04_flops_and_mfu(self):
        f = self.script("04_flops_and_mfu.ein")
        B, D, K = 1024, 256, 64
        self.assertEqual(self.cost_total(f, "--fn", "linear"), (2 * B * D * K, 2 * B * D * K))
        self.assertEqual(self.cost_total(f, "--fn", "add"), (B * D, 0))
        log = os.path.join(self.tmp, "log.jsonl")
        self.ein("train", f, "--steps", "5", "--log", log, "--quiet")
        rows = self.log(log)
        self.assertEqual(len(rows), 5)
        for r in rows:
            # forward 2·B·D·K + the weight gradient's 2·B·D·K + the loss's elementwise FLOPs
            self.assertGreaterEqual(r["flops"], 4 * B * D * K)
            self.assertLess(r["flops"], 4 * B * D * K * 1.01)
            self.assertAlmostEqual(r["flops_per_s"] * r["ms"] / 1e3 / r["flops"], 1, places=2)
            self.assertGreater(r["mfu"], 0)
            self.assertLess(r["mfu"], 1)
        self.assertLess(rows[-1]["loss"], rows[0]["loss"])

    # gradients_basics, gradients_flops
    def test_05_gradients(self):
        f = self.script("05_gradients.ein")
        inputs = os.path.join(self.tmp, "xw.safetensors")
        write_safetensors(inputs, {"x": ([3], [1, 2, 3]), "w": ([3], [1, 1, 1])})
        out = self.ein("run", f, "--fn", "loss", "--grad", "--inputs", inputs)
        self.assertEqual(outputs(out)[0][1], [0.5])
        self.assertIn("grad of input 1: tensor([1., 2., 3.]", out)  # w.grad == [1, 2, 3]
        B, D, K = 1024, 256, 64
        forward = 2 * B * D * D + 2 * B * D * K
        self.assertEqual(self.cost_total(f, "--fn", "two_layers")[1], forward)
        out = self.ein("emit", f, "--fn", "two_layers", "--stage", "cost", "--backward",
                       "--weight", "1", "--weight", "2")
        split = {m.group(1): int(m.group(2))
                 for m in re.finditer(r"^\s+(input gradients|weight gradients|recomputed)\s+(\d+) FLOPs", out, re.M)}
        self.assertEqual(split["weight gradients"], 2 * B * D * K + 2 * B * D * D)
        self.assertEqual(split["recomputed"], forward)
        # The lecture's count, 4·B·D·K + 4·B·D·D (x's gradient included): twice the forward,
        # plus the loss's elementwise backward.
        both = split["input gradients"] + split["weight gradients"]
        self.assertGreaterEqual(both, 2 * forward)
        self.assertLess(both, 2 * forward * 1.01)

    # module_parameters: outputs grow like sqrt(input_dim) unless the draw is scaled
    def test_06_parameters(self):
        f = "06_parameters.ein"
        for seed in ("0", "1", "2"):
            (unscaled,) = self.run_fn(f, "unscaled", "--seed", seed)[1]
            (xavier,) = self.run_fn(f, "xavier", "--seed", seed)[1]
            self.assertGreater(unscaled, 128 * 0.6)  # sqrt(16384) = 128
            self.assertLess(unscaled, 128 * 1.5)
            self.assertGreater(xavier, 0.6)
            self.assertLess(xavier, 1.5)

    # custom_model, optimizer: Cruncher's table; the script's AdaGrad is the stdlib's, bitwise
    def test_07_custom_optimizer(self):
        f = self.script("07_custom_optimizer.ein")
        out = self.ein("check", f)
        table = dict(re.findall(r"^(\S+)\s+f32\[[\d ]+\]\s+(\d+)$", out, re.M))
        self.assertEqual(table, {"layers.0.weight": "4096", "layers.1.weight": "4096",
                                 "final.weight": "64"})
        self.assertIn("8256 parameters", out)  # (D·D·num_layers) + D
        mine, stdlib = os.path.join(self.tmp, "mine.jsonl"), os.path.join(self.tmp, "std.jsonl")
        self.ein("train", f, "--log", mine, "--quiet")
        self.ein("train", os.path.join(LECTURE, "..", "scripts", "cruncher_adagrad.ein"),
                 "--log", stdlib, "--quiet")
        losses = [r["loss"] for r in self.log(mine)]
        self.assertEqual(losses, [r["loss"] for r in self.log(stdlib)])
        self.assertLess(losses[-1], losses[0] / 100)
        # The lecture's memory, float32: parameters, gradients and AdaGrad's one state of 4
        # bytes each per parameter; activations B·D·num_layers values (and the B residuals
        # the squared error keeps for its backward).
        memory = json.loads(self.ein("report", f, "--format", "json"))["memory"]
        B, D, num_layers, params = 8, 64, 2, 8256
        self.assertEqual((memory["params"], memory["grads"], memory["optimizer"]),
                         (4 * params, 4 * params, 4 * params))
        self.assertEqual(memory["activations"], 4 * (B * D * num_layers + B))

    # data_loading, checkpointing: batches from an int32 token file; an exact resume
    def test_08_data_and_checkpoints(self):
        f = self.script("08_data_and_checkpoints.ein")
        data = os.path.join(self.tmp, "tokens.i32")
        with open(data, "wb") as out:  # np.array([...], dtype=np.int32).tofile(...)
            out.write(struct.pack("<500i", *[(i * 7) % 10 + 1 for i in range(500)]))
        whole, part = os.path.join(self.tmp, "whole.jsonl"), os.path.join(self.tmp, "part.jsonl")
        ck = os.path.join(self.tmp, "ck")
        self.ein("train", f, "--data", data, "--steps", "40", "--log", whole, "--quiet")
        self.ein("train", f, "--data", data, "--checkpoint", ck, "--log", part, "--quiet")
        self.assertEqual(sorted(os.listdir(ck)),
                         ["latest", "step_10.safetensors", "step_20.safetensors", "step_30.safetensors"])
        self.ein("train", f, "--data", data, "--checkpoint", ck, "--resume", "--steps", "40",
                 "--log", part, "--quiet")
        a, b = self.log(whole), self.log(part)
        self.assertEqual([r["step"] for r in b], list(range(1, 41)))
        self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])  # bit for bit

    # train_loop, mixed_precision_training
    def test_09_mixed_precision(self):
        f = self.script("09_mixed_precision.ein")
        bf16, fp32 = os.path.join(self.tmp, "bf16.jsonl"), os.path.join(self.tmp, "fp32.jsonl")
        self.ein("train", f, "--log", bf16, "--quiet")
        self.ein("train", f, "--precision", "fp32", "--log", fp32, "--quiet")
        for path, floor in ((bf16, 1e-3), (fp32, 1e-6)):
            losses = [r["loss"] for r in self.log(path)]
            self.assertEqual(len(losses), 200)
            tail = sum(losses[-10:]) / 10
            self.assertLess(tail, losses[0] * floor, path)
        self.assertGreater(sum(r["loss"] for r in self.log(bf16)[-10:]),
                           sum(r["loss"] for r in self.log(fp32)[-10:]))  # bf16 stops higher

    # The napkin math of the README's table
    def test_10_napkin_math(self):
        out = self.ein("estimate", "--params", "70e9", "--tokens", "15e12", "--gpus", "1024",
                       "--hw", "h100", "--mfu", "0.5")
        self.assertIn("143.93 days", out)
        out = self.ein("estimate", "--gpus", "8", "--hw", "h100", "--optimizer", "adamw",
                       "--precision", "fp32")
        self.assertRegex(out, r"40(\.0+)? ?G")


def main():
    global EIN, LECTURE
    EIN = cli.EIN = os.path.abspath(sys.argv[1])
    LECTURE = os.path.join(os.path.abspath(sys.argv[2]), "lecture")
    unittest.main(argv=sys.argv[:1], verbosity=1)


if __name__ == "__main__":
    main()
