#!/usr/bin/env python3
"""`ein quantize`, end to end: a trained GPT's checkpoint quantized to q8_0 and q4_0; the file
it writes decoded here with the standard library alone (so its layout is the one
docs/quantization.md describes, not just the one ein reads back) and every value within the
format's bound of the trained one; the loss before and after; `ein train --init` of the
quantized file; and the mistakes ein refuses, each with a clear message.

Usage: test_ein_quantize_cli.py EIN_BINARY EXAMPLES_DIR
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

EIN = None
EXAMPLES = None
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped")
TINY = ["--set", "D=32", "--set", "L=1", "--set", "H=2", "--set", "T=16", "--set", "B=4"]


def ein(*args, timeout=120):
    p = subprocess.run([EIN, *args], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes), and the metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[8 + n + a:8 + n + b])
    return out, meta


def values(dtype, raw):
    code = {"F32": "f", "F16": "e", "I8": "b", "U8": "B"}[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(code), code), raw))


def dequantized(tensors, name, info):
    """The values of quantized tensor `name` as docs/quantization.md defines them."""
    shape, kind = info["shape"], info["type"]
    n = shape[-1]
    rows = 1
    for s in shape[:-1]:
        rows *= s
    nb = (n + 31) // 32
    scales = values("F16", tensors[name + ".qscales"][2])
    codes = values(tensors[name + ".qcodes"][0], tensors[name + ".qcodes"][2])
    out, ds = [], []
    for r in range(rows):
        for i in range(n):
            d = scales[r * nb + i // 32]
            if kind == "q8_0":
                c = codes[r * n + i]
            else:
                byte = codes[r * ((n + 1) // 2) + i // 2]
                c = (byte & 15 if i % 2 == 0 else byte >> 4) - 8
            out.append(c * d)
            ds.append(abs(d))
    return out, ds


class Quantize(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ein_quantize_cli_")
        cls.script = os.path.join(EXAMPLES, "gpt", "byte_gpt.ein")
        rc, out, err = ein("train", cls.script, *TINY, "--steps", "30", "--quiet",
                           "--checkpoint", os.path.join(cls.tmp, "ck"))
        assert rc == 0, err
        cls.trained = os.path.join(cls.tmp, "ck", "step_30.safetensors")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def quantize(self, kind):
        path = os.path.join(self.tmp, kind + ".safetensors")
        rc, out, err = ein("quantize", self.trained, "--type", kind, "--min-elements", "256",
                           "--script", self.script, *TINY, "--batches", "3", "-o", path)
        self.assertEqual(rc, 0, err)
        return path, out

    def check_file(self, path, kind, bound):
        tensors, meta = read_safetensors(path)
        original, _ = read_safetensors(self.trained)
        quantized = {k[len("quant:"):]: json.loads(v) for k, v in meta.items() if k.startswith("quant:")}
        self.assertIn("model.wte.weight", quantized)
        self.assertFalse(any(k.startswith("optim.") for k in tensors))
        for name, info in quantized.items():
            self.assertEqual(info["type"], kind)
            want = values("F32", original[name][2])
            got, ds = dequantized(tensors, name, info)
            self.assertEqual(len(got), len(want))
            worst = max(abs(g - w) - bound * d for g, w, d in zip(got, want, ds))
            self.assertLessEqual(worst, 0, name)
            self.assertGreater(sum(g != w for g, w in zip(got, want)), 0, name)
        for name, (dtype, shape, raw) in tensors.items():  # the rest as they were
            if not name.endswith((".qcodes", ".qscales")):
                self.assertEqual(raw, original[name][2], name)

    def test_q8_0(self):
        path, out = self.quantize("q8_0")
        self.assertRegex(out, r"q8_0: \d+ tensors, [\d,]+ weights: .* \(8\.5 bits a weight\)")
        # The optimizer state is left out: counted from the header, not read.
        original = read_safetensors(self.trained)[0]
        optim = [k for k in original if k.startswith("optim.")]
        self.assertGreater(len(optim), 0)
        left = re.search(r"left out: (\d+) optimizer tensors \(optim\.\*\), ([\d.]+) kB", out)
        self.assertIsNotNone(left, out)
        self.assertEqual(int(left.group(1)), len(optim))
        self.assertAlmostEqual(float(left.group(2)) * 1000,
                               sum(len(original[k][2]) for k in optim), delta=0.05 * 1000)
        rows = [line.split()[0] for line in out.splitlines() if line.startswith("model.")]
        self.assertEqual(rows, [k for k in original if not k.startswith("optim.")])
        m = re.search(r"loss on 3 batches of .*: ([\d.]+) as trained, ([\d.]+) in q8_0", out)
        self.assertIsNotNone(m, out)
        before, after = float(m.group(1)), float(m.group(2))
        self.assertGreater(before, 0)
        self.assertLess(abs(after - before), 0.01 * before)
        self.assertIn("wrote " + path, out)
        self.check_file(path, "q8_0", 0.5)
        # --init takes it (dequantized); a zero-step run samples from it
        rc, out, err = ein("train", self.script, *TINY, "--init", path, "--steps", "0", "--quiet")
        self.assertEqual(rc, 0, err)

    def test_q4_0(self):
        path, out = self.quantize("q4_0")
        self.assertIn("(4.5 bits a weight)", out)
        self.check_file(path, "q4_0", 1.0)
        self.assertLess(os.path.getsize(path), os.path.getsize(os.path.join(self.tmp, "ck", "step_30.safetensors")) / 4)

    def test_report_prices_what_quantize_writes(self):
        # Accounting is correctness: `ein report`'s inference weights are the bytes of the
        # tensors `ein quantize` writes (its default rule), and of the checkpoint's model.
        rc, out, err = ein("report", self.script, *TINY, "--format", "json")
        self.assertEqual(rc, 0, err)
        priced = {w["format"]: w for w in json.loads(out)["memory"]["inference_weights"]}
        self.assertEqual(list(priced), ["fp32", "bf16", "fp16", "fp8", "q8_0", "q4_0"])
        model = {k: v for k, v in read_safetensors(self.trained)[0].items() if not k.startswith("optim.")}
        self.assertEqual(priced["fp32"]["bytes"], sum(len(raw) for _, _, raw in model.values()))
        self.assertEqual(priced["bf16"]["bytes"] * 2, priced["fp32"]["bytes"])
        for kind in ("q8_0", "q4_0"):
            path = os.path.join(self.tmp, "priced_" + kind + ".safetensors")
            rc, out, err = ein("quantize", self.trained, "--type", kind, "-o", path)
            self.assertEqual(rc, 0, err)
            tensors, meta = read_safetensors(path)
            written = sum(len(raw) for _, _, raw in tensors.values())
            self.assertEqual(priced[kind]["bytes"], written, kind)
            self.assertEqual(priced[kind]["quantized_tensors"], sum(k.startswith("quant:") for k in meta))
            self.assertGreater(priced[kind]["quantized_tensors"], 0)
            self.assertGreater(priced[kind]["kept_tensors"], 0)  # norms and biases
            self.assertLess(written, priced["fp32"]["bytes"] / 3)

    def test_mistakes(self):
        q = os.path.join(self.tmp, "m.safetensors")
        self.assertEqual(ein("quantize", self.trained, "-o", q)[0], 0)
        for args, message in [
                (["quantize", self.trained, "--type", "q5_1"], "--type q5_1: expected q8_0 or q4_0"),
                (["quantize", self.trained, "-o", self.trained], "that is the input"),
                (["quantize", q], "is quantized already"),
                (["quantize", os.path.join(self.tmp, "missing.safetensors")], "cannot open"),
                (["quantize", self.script], "invalid safetensors file"),
                (["quantize", self.trained, "--batches", "0", "--script", self.script], "--batches"),
                (["quantize", self.trained, "--script", os.path.join(self.tmp, "none.ein")], "none.ein")]:
            rc, out, err = ein(*args)
            self.assertEqual(rc, 1, (args, out, err))
            self.assertIn(message, err, args)
            for leak in LEAKS:
                self.assertNotIn(leak, err, args)
        # the refused -o left the trained checkpoint as it was
        self.assertTrue(read_safetensors(self.trained)[0])


def main():
    global EIN, EXAMPLES
    EIN, EXAMPLES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]], verbosity=2)


if __name__ == "__main__":
    main()
