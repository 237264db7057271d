#!/usr/bin/env python3
"""`ein estimate` end to end: the lecture's scenarios in text and JSON, the exit codes
(0 ok, 1 a bad value, 2 a usage error) and that no C++ internals leak into messages.

Usage: test_ein_estimate_cli.py EIN_BINARY

The formulas are unit-tested in tests/tools/estimate_test.cpp; this file checks the wiring,
the stable JSON keys (docs/estimate.md) and the wording that says where the lecture rounds.
Standard library only.
"""

import json
import subprocess
import sys
import unittest

EIN = None  # set from argv in main()
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped")

TIME = ["--params", "70e9", "--tokens", "15e12", "--gpus", "1024", "--hw", "h100", "--mfu", "0.5"]
FIT = ["--gpus", "8", "--hw", "h100", "--optimizer", "adamw", "--precision", "fp32"]


def ein(*args):
    p = subprocess.run([EIN, "estimate", *args], capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


class Scenarios(unittest.TestCase):
    def test_time_text(self):
        rc, out, err = ein(*TIME)
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("6·N·D (2 FLOPs per multiply-add, backward = 2x forward)", out)
        self.assertIn("143.93 days", out)
        self.assertIn("the lecture says ~146 days", out)
        self.assertIn("6.3e24", out)

    def test_time_json(self):
        rc, out, _ = ein(*TIME, "--format", "json")
        self.assertEqual(rc, 0)
        j = json.loads(out)
        self.assertEqual(j["total_flops"], 6.3e24)
        self.assertAlmostEqual(j["days"], 143.9266, places=3)
        self.assertEqual(round(6.3e24 / 5e17 / 86400), 146)  # the lecture's rounded path
        for key in ("sustained_flops_per_s", "seconds", "gpu_hours", "tokens_per_param", "hardware"):
            self.assertIn(key, j)
        self.assertEqual(j["hardware"]["peak_flops"], 989.5e12)
        self.assertNotIn("max_params", j)

    def test_largest_model(self):
        rc, out, _ = ein(*FIT)
        self.assertEqual(rc, 0)
        self.assertIn("16 B/param", out)
        self.assertIn("40,000,000,000", out)
        self.assertIn("activations excluded", out)
        j = json.loads(ein(*FIT, "--format", "json")[1])
        self.assertEqual(j["max_params"], 40e9)
        self.assertEqual(j["memory"]["bytes_per_param"], 16)
        self.assertTrue(j["memory"]["activations_excluded"])

    def test_eight_b_mixed(self):
        rc, out, _ = ein("--params", "8B", "--precision", "mixed")
        self.assertEqual(rc, 0)
        j = json.loads(ein("--params", "8B", "--precision", "mixed", "--format", "json")[1])
        self.assertEqual([i["bytes"] for i in j["memory"]["items"]], [16e9, 32e9, 32e9, 64e9])
        self.assertEqual(j["memory"]["bytes"], 144e9)
        self.assertIn("the lecture's 8B breakdown", out)

    def test_zero_and_activations(self):
        j = json.loads(ein("--params", "7.5e9", "--gpus", "4", "--zero", "2", "--precision",
                           "mixed-bf16-grads", "--format", "json")[1])
        self.assertEqual(j["zero"]["total"], 41.25e9)
        self.assertEqual([s["total"] for s in j["zero"]["stages"]], [120e9, 52.5e9, 41.25e9, 30e9])
        j = json.loads(ein("--seq", "2048", "--batch", "1", "--hidden", "12288", "--heads", "96",
                           "--layers", "96", "--format", "json")[1])
        self.assertEqual(j["activations"]["per_layer"]["none"], 2868903936)
        self.assertEqual(j["activations"]["total"]["full"], 96 * 2 * 2048 * 12288)

    def test_inference_weights(self):
        rc, out, err = ein("--params", "8e9", "--weights", "q8_0", "--hw", "h100")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("Inference weights: q8_0, 8.5 bits a weight", out)
        self.assertIn("8,500,000,000 B = 8,000,000,000 x 8.5 / 8", out)
        self.assertIn("394.1 tok/s", out)  # 3.35e12 B/s / 8.5e9 B
        j = json.loads(ein("--params", "70e9", "--weights", "q4_0", "--hw", "h100", "--gpus", "2",
                           "--format", "json")[1])
        self.assertEqual(j["weights"]["bytes"], 70e9 * 4.5 / 8)
        self.assertEqual(j["weights"]["max_params"], (2 * 80e9 * 8) // 4.5)
        self.assertAlmostEqual(j["weights"]["decode_tokens_per_s_bound"], 2 * 3.35e12 / (70e9 * 4.5 / 8))
        j = json.loads(ein("--params", "1e9", "--weights", "bf16", "--format", "json")[1])
        self.assertEqual(j["weights"], {"format": "bf16", "bits_per_weight": 16, "bytes": 2e9})

    def test_help_shows_the_lecture_scenarios(self):
        p = subprocess.run([EIN, "estimate", "--help"], capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0)
        self.assertIn("--params 70e9 --tokens 15e12 --gpus 1024 --hw h100 --mfu 0.5", p.stdout.decode())

    def test_list_hw(self):
        rc, out, _ = ein("--list-hw")
        self.assertEqual(rc, 0)
        for name in ("A100 SXM 80GB", "H100 SXM", "H100 PCIe", "H200 SXM"):
            self.assertIn(name, out)


class ExitCodes(unittest.TestCase):
    def check(self, args, code, message):
        rc, out, err = ein(*args)
        self.assertEqual(rc, code, f"{args}: {err}")
        self.assertEqual(out, "")
        self.assertIn(message, err)
        for leak in LEAKS:
            self.assertNotIn(leak, err)

    def test_bad_values_exit_1(self):
        self.check(["--params", "lots", "--tokens", "1"], 1, "--params: expected a number")
        self.check(["--params", "-5", "--tokens", "1"], 1, "must be positive")
        self.check([*TIME[:-1], "1.5"], 1, "--mfu: a fraction in (0, 1]")
        self.check(["--hw", "v100"], 1, "unknown hardware 'v100'; known: a100")
        self.check(["--hw", "a100", "--dtype", "fp8"], 1, "has no fp8 arithmetic")
        self.check(["--gpus", "2.5", "--hw", "h100", "--optimizer", "adamw"], 1, "whole number")
        self.check(["--optimizer", "rmsprop"], 1, "unknown 'rmsprop'")
        self.check(["--weights", "q3_k", "--params", "1e9"], 1, "--weights: unknown 'q3_k'; known: fp32")
        self.check(["--params", "1e9", "--gpus", "8", "--zero", "4"], 1, "--zero: a stage")
        self.check(["--seq", "8", "--batch", "1", "--hidden", "12", "--heads", "3", "--tp", "2"], 1,
                   "divisible")

    def test_usage_errors_exit_2(self):
        self.check([], 2, "nothing to estimate")
        self.check(["--tokens", "1e12"], 2, "--tokens needs --params")
        self.check(["--zero", "1", "--params", "1e9"], 2, "--zero needs --params and --gpus")
        self.check(["--seq", "2048"], 2, "needs all of --seq, --batch, --hidden and --heads")
        self.check(["--weights", "q8_0"], 2, "--weights needs --params, --hw or both")
        self.check(["--bogus"], 2, "error:")
        self.check(["--format", "xml", "--hw", "h100"], 2, "error:")


def main():
    global EIN
    EIN = sys.argv.pop(1)
    result = unittest.main(exit=False, verbosity=1).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
