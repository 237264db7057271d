#!/usr/bin/env python3
"""`ein sample`, end to end: a GPT trained by `ein train` samples the same text from its
checkpoint (file or directory) as `ein train` printed from the weights in memory, each token
printed as it is drawn; greedy, top-k 1 and the smallest top-p agree; seeds and
--num-samples; an `ein quantize` file samples, its decode step reading the file's codes (and
--quantize rounding an f32 checkpoint to them); a bf16 key-value cache (--cache-dtype); and
the mistakes ein refuses, each with a clear
message and no crash.

Usage: test_ein_sample_cli.py EIN_BINARY EXAMPLES_DIR
"""

import json
import os
import re
import shutil
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


class Sample(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ein_sample_cli_")
        cls.script = os.path.join(EXAMPLES, "gpt", "byte_gpt.ein")
        cls.ck = os.path.join(cls.tmp, "ck")
        rc, out, err = ein("train", cls.script, *TINY, "--steps", "30", "--checkpoint", cls.ck,
                           "--device", "cpu")
        assert rc == 0, err
        # the block's sample: "The " continued by 300 bytes at temperature 0.8, seed 0
        assert "\nsample:\n" in out, out
        cls.trained_sample = out.split("\nsample:\n", 1)[1]
        cls.step = os.path.join(cls.ck, "step_30.safetensors")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def sample(self, *args):
        rc, out, err = ein("sample", self.script, *TINY, "--device", "cpu", *args)
        self.assertEqual(rc, 0, err)
        return out, err

    def test_same_text_as_ein_train(self):
        out, err = self.sample(self.ck)
        self.assertEqual(out, self.trained_sample)
        self.assertTrue(out.startswith("The "), out)
        m = re.search(r"ein sample: 300 tokens in ([\d.]+) s: ([\d.]+) ms a token \(median; "
                      r"([\d.]+) tokens/s\) after the first, which took ([\d.]+) s .*; on cpu, "
                      r"at most [\d.]+ [kMG]?B allocated; weights: (.*)", err)
        self.assertIsNotNone(m, err)
        total, ms, rate, first = (float(m.group(i)) for i in range(1, 5))
        self.assertGreater(rate, 0)
        # The median is printed with 3 significant digits or more (a tiny model's token takes
        # a few hundredths of a ms), so the rate beside it agrees within 0.5%.
        self.assertGreaterEqual(len(m.group(2).replace(".", "").lstrip("0")), 3, m.group(2))
        self.assertAlmostEqual(rate * ms, 1000, delta=5)
        self.assertLessEqual(first + 299 * ms / 1000 * 0.5, total)  # at least half of the rest
        self.assertIn("step_30.safetensors (step 30)", m.group(5))
        # the file itself, as the directory's latest, gives the same text
        self.assertEqual(self.sample(self.step, "--quiet")[0], out)

    def test_flops_are_what_ein_report_counts(self):
        # Accounting: without the cache a token costs the forward of fn logits over the window,
        # counted by the runtime as ein report predicts it (fused attention and all).
        rc, out, rerr = ein("report", self.script, *TINY, "--fn", "train.logits", "--format", "json")
        self.assertEqual(rc, 0, rerr)
        report = json.loads(out)
        _, err = self.sample(self.step, "--length", "3", "--no-cache")
        m = re.search(r"([\d,]+) FLOPs a token drawn \(fn logits over a window of 16, --no-cache\)",
                      err)
        self.assertIsNotNone(m, err)
        self.assertEqual(int(m.group(1).replace(",", "")), report["flops"]["forward"])
        self.assertGreater(report["flops"]["forward"], report["flops"]["forward_matmul"])
        # With it, each step (a prompt token or a drawn one) costs the decode step that ein
        # report predicts, the caches' bytes too: a 1-byte prompt and 4 drawn tokens are 5
        # steps; a 12-byte prompt goes in by one pass over the window (fn logits's forward), then
        # the 2 drawn tokens read are steps.
        decode = report["decode"]
        self.assertEqual(decode["window_flops_per_token"], report["flops"]["forward"])
        self.assertLess(decode["flops_per_token"] * 8, decode["window_flops_per_token"])
        _, err = self.sample(self.step, "--length", "5", "--prompt", "T")
        m = re.search(r"([\d,]+) FLOPs a token drawn \(key-value cache of ([\d.]+) kB: 5 tokens "
                      r"through it, 5 steps of ([\d,]+) FLOPs; [\d.]+ kB of weights held\)", err)
        self.assertIsNotNone(m, err)
        self.assertEqual(int(m.group(3).replace(",", "")), decode["flops_per_token"])
        self.assertEqual(int(m.group(1).replace(",", "")), decode["flops_per_token"])
        self.assertAlmostEqual(float(m.group(2)) * 1000, decode["cache_bytes"], delta=1)
        _, err = self.sample(self.step, "--length", "3", "--prompt", "The licence ")
        m = re.search(r"([\d,]+) FLOPs a token drawn \(key-value cache of [\d.]+ kB: 14 tokens "
                      r"through it, the prompt in one pass over the window, 2 steps of ([\d,]+) "
                      r"FLOPs; [\d.]+ kB of weights held\)", err)
        self.assertIsNotNone(m, err)
        self.assertEqual(int(m.group(2).replace(",", "")), decode["flops_per_token"])
        self.assertEqual(int(m.group(1).replace(",", "")),  # printed rounded
                         round((report["flops"]["forward"] + 2 * decode["flops_per_token"]) / 3))
        # Past the window each token recomputes it, at what ein report predicts (here by the
        # window's pass: refilling the caches and a step would not save enough FLOPs).
        _, err = self.sample(self.step, "--length", "4", "--prompt", "The licence of ")
        m = re.search(r"16 tokens through it, the prompt in one pass over the window, 1 step of "
                      r"[\d,]+ FLOPs; 2 tokens past the window, ([\d,]+) FLOPs each", err)
        self.assertIsNotNone(m, err)
        self.assertFalse(decode["past_window_refills"])
        self.assertEqual(int(m.group(1).replace(",", "")), decode["past_window_flops_per_token"])
        self.assertEqual(decode["past_window_flops_per_token"], report["flops"]["forward"])

    def test_greedy_top_k_and_seeds(self):
        greedy, _ = self.sample(self.step, "--temperature", "0", "--length", "60", "--prompt", "the ")
        self.assertTrue(greedy.startswith("the "), greedy)
        self.assertEqual(len(greedy.encode()), len("the ") + 60 + 1)  # ASCII here, and a newline
        top1, _ = self.sample(self.step, "--top-k", "1", "--length", "60", "--prompt", "the ")
        self.assertEqual(top1, greedy)  # top-k 1 at any temperature is greedy
        nucleus, _ = self.sample(self.step, "--top-p", "1e-9", "--length", "60", "--prompt", "the ")
        self.assertEqual(nucleus, greedy)  # so is the smallest nucleus: the most likely token
        # The block's top_k and top_p are the defaults (top_k = 1: greedy), the flags override.
        with open(self.script) as f:
            text = f.read().replace('"corpus.txt"', json.dumps(os.path.join(EXAMPLES, "gpt", "corpus.txt")))
        settings = os.path.join(self.tmp, "settings.ein")
        with open(settings, "w") as f:
            f.write(text.replace("  temperature = 0.8\n", "  temperature = 0.8\n  top_k = 1\n  top_p = 0.9\n"))
        rc, out, err = ein("sample", settings, self.step, *TINY, "--length", "60", "--prompt", "the ")
        self.assertEqual((rc, out), (0, greedy), err)
        rc, out, err = ein("sample", settings, self.step, *TINY, "--length", "60", "--prompt", "the ",
                           "--top-k", "0", "--top-p", "1", "--seed", "5")
        self.assertEqual(rc, 0, err)
        self.assertNotEqual(out, greedy)
        with open(settings, "w") as f:
            f.write(text.replace("  temperature = 0.8\n", "  temperature = 0.8\n  top_p = 0\n"))
        rc, out, err = ein("sample", settings, self.step, *TINY)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("settings.ein:", err)
        self.assertIn("train setting 'top_p' must be a probability in (0, 1], got 0", err)
        two, _ = self.sample(self.step, "--num-samples", "2", "--length", "40", "--seed", "5")
        first, second = two.split("---\n")
        self.assertEqual(first, self.sample(self.step, "--length", "40", "--seed", "5")[0])
        self.assertEqual(second, self.sample(self.step, "--length", "40", "--seed", "6")[0])
        self.assertNotEqual(first, second)
        with open(os.path.join(self.tmp, "prompt.txt"), "w") as f:
            f.write("License")
        from_file, _ = self.sample(self.step, "--prompt-file", os.path.join(self.tmp, "prompt.txt"),
                                   "--length", "10")
        self.assertTrue(from_file.startswith("License"), from_file)
        ids, _ = self.sample(self.step, "--tokens", "76,105", "--length", "3", "--temperature", "0")
        self.assertTrue(ids.startswith("Li"), ids)
        # --length 0 prints the prompt and says nothing was drawn (not that there was no cache)
        none, err = self.sample(self.step, "--length", "0", "--prompt", "the ")
        self.assertEqual(none, "the \n")
        self.assertIn("0 tokens in", err)
        self.assertIn("(none drawn)", err)
        self.assertNotIn("--no-cache", err)

    def test_tokens_print_as_they_are_drawn(self):
        # A million tokens take a minute (past the window each recomputes it); the first ones
        # are on stdout long before: read the prompt and 20 bytes, then stop the process.
        p = subprocess.Popen([EIN, "sample", self.script, self.step, *TINY, "--device", "cpu",
                              "--length", "1000000", "--temperature", "0", "--prompt", "the "],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            got = b""
            while len(got) < len("the ") + 20:
                chunk = os.read(p.stdout.fileno(), 64)
                if not chunk:
                    break
                got += chunk
            self.assertIsNone(p.poll(), "the process ended before its text was read")
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
        self.assertTrue(got.startswith(b"the "), got)
        whole, _ = self.sample(self.step, "--length", "60", "--temperature", "0", "--prompt", "the ")
        self.assertTrue(whole.encode().startswith(got[:len("the ") + 20]), (got, whole))

    def test_quantized_weights(self):
        q = os.path.join(self.tmp, "q8_0.safetensors")
        rc, out, err = ein("quantize", self.step, "--min-elements", "256", "-o", q)
        self.assertEqual(rc, 0, err)
        out, err = self.sample(q, "--length", "50")
        self.assertTrue(out.startswith("The "), out)
        # The file's codes are read as they are: the script is loaded without allocating, and
        # only the parameters without codes get floats.
        self.assertIn("(quantized: its codes read as they are)", err)
        # The decode step reads its matrices from the file's codes: q, k and v (thirds of
        # qkv), proj, fc, fc2 and the tied LM head; the text is what the same values give as
        # floats (--quantize none), greedy.
        greedy = ["--length", "40", "--temperature", "0"]
        out, err = self.sample(q, *greedy)
        self.assertIn("the steps and the window's pass read 7 weight matrices from q8_0 codes", err)
        # ein report predicts those matrices and their codes' bytes (its "Sampling" section),
        # and the weights the decoder holds: the codes, and the floats no product reads
        # (positions, norms, biases, the mask), not the f32 matrices.
        rc, report, rerr = ein("report", self.script, *TINY, "--format", "json")
        self.assertEqual(rc, 0, rerr)
        decode = json.loads(report)["decode"]
        self.assertEqual(decode["quantized_matrices"], 7)
        read = re.search(r"from q8_0 codes \(([\d.]+) kB\); ([\d.]+) kB of weights held", err)
        self.assertIsNotNone(read, err)
        self.assertAlmostEqual(decode["q8_0_matrix_bytes"] / 1e3, float(read.group(1)), delta=0.05)
        self.assertAlmostEqual(decode["q8_0_held_bytes"] / 1e3, float(read.group(2)), delta=0.05)
        # From f32 it holds every parameter and the mask; from codes, the 7 matrices' codes
        # instead of their floats (the embedding's too: its rows are gathered from them).
        self.assertEqual(decode["q8_0_held_bytes"],
                         decode["f32_held_bytes"] - decode["matrix_bytes"]
                         + decode["q8_0_matrix_bytes"])
        floats, err_floats = self.sample(q, *greedy, "--quantize", "none")
        self.assertNotIn("weight matrices from", err_floats)
        self.assertIn("(quantized, read as the values its codes stand for)", err_floats)
        # Loading floats allocates the matrices' dequantized values; reading the codes as they
        # are never does, so the process peaks lower (tests/api/decoder_test.cpp bounds it).
        peaks = [re.search(r"; on cpu, at most ([\d.]+) kB allocated;", e)
                 for e in (err, err_floats)]
        self.assertTrue(all(peaks), (err, err_floats))
        self.assertLess(float(peaks[0].group(1)), float(peaks[1].group(1)), peaks)
        held = re.search(r"([\d.]+) kB of weights held", err_floats)
        self.assertIsNotNone(held, err_floats)
        self.assertAlmostEqual(decode["f32_held_bytes"] / 1e3, float(held.group(1)), delta=0.05)
        self.assertEqual(out, floats)
        # An f32 checkpoint rounded to q4_0 codes on load: the same text as its q4_0 file.
        q4 = os.path.join(self.tmp, "q4_0.safetensors")
        rc, _, err = ein("quantize", self.step, "--type", "q4_0", "-o", q4)
        self.assertEqual(rc, 0, err)
        rounded, err = self.sample(self.step, *greedy, "--quantize", "q4_0")
        self.assertIn("the steps and the window's pass read 7 weight matrices from q4_0 codes", err)
        held = re.search(r"([\d.]+) kB of weights held", err)
        self.assertIsNotNone(held, err)
        self.assertAlmostEqual(decode["q4_0_held_bytes"] / 1e3, float(held.group(1)), delta=0.05)
        self.assertIn("(rounded to q4_0 codes: --quantize)", err)
        from_file, err = self.sample(q4, *greedy)
        self.assertIn("the steps and the window's pass read 7 weight matrices from q4_0 codes", err)
        self.assertEqual(rounded, from_file)

    def test_bf16_cache(self):
        # --cache-dtype bf16: the caches in half the bytes ein report predicts for them, the
        # FLOPs of the f32 cache's steps, and (this model, greedy) the same text.
        rc, out, rerr = ein("report", self.script, *TINY, "--fn", "train.logits",
                            "--format", "json")
        self.assertEqual(rc, 0, rerr)
        decode = json.loads(out)["decode"]
        self.assertEqual(decode["bf16_cache_bytes"] * 2, decode["cache_bytes"])
        self.assertLess(decode["bf16_cache_bytes_per_token"], decode["bytes_per_token"])
        f32, err32 = self.sample(self.step, "--length", "12", "--prompt", "T", "--temperature", "0")
        bf16, err = self.sample(self.step, "--length", "12", "--prompt", "T", "--temperature", "0",
                                "--cache-dtype", "bf16")
        self.assertEqual(bf16, f32)
        m = re.search(r"([\d,]+) FLOPs a token drawn \(key-value cache of ([\d.]+) kB \(bf16\): "
                      r"12 tokens through it, 12 steps of ([\d,]+) FLOPs", err)
        self.assertIsNotNone(m, err)
        self.assertAlmostEqual(float(m.group(2)) * 1000, decode["bf16_cache_bytes"], delta=1)
        self.assertEqual(int(m.group(3).replace(",", "")), decode["flops_per_token"])
        self.assertIn("key-value cache of", err32)
        self.assertNotIn("(bf16)", err32)

    def test_mistakes(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty, exist_ok=True)
        for args, message in [
                ([os.path.join(self.tmp, "missing.safetensors")], "cannot open"),
                ([empty], "no checkpoint of ein train in this directory"),
                ([self.script], "invalid safetensors file"),
                ([self.step, "--set", "D=64,L=1,H=2,T=16,B=4"], "does not fit"),
                ([self.step, "--top-k", "-1"], "top-k -1 is negative"),
                ([self.step, "--top-p", "1.5"], "top-p 1.5; expected a probability in (0, 1]"),
                ([self.step, "--temperature", "-1"], "temperature -1"),
                ([self.step, "--length", "-3"], "length -3 is negative"),
                ([self.step, "--num-samples", "0"], "--num-samples 0"),
                ([self.step, "--tokens", "300"], "index 300 at flat position 0 is out of range for 256 rows"),
                ([self.step, "--tokens", "7,x"], "'x' is not a token id"),
                ([self.step, "--tokens", "1", "--prompt", "a"], "give one of --prompt"),
                ([self.step, "--prompt-file", os.path.join(self.tmp, "none.txt")], "cannot open"),
                ([self.step, "--precision", "fp64"], "--precision fp64"),
                ([self.step, "--quantize", "q5_1"], "--quantize q5_1: expected q8_0, q4_0 or none"),
                ([self.step, "--quantize", "q8_0", "--precision", "bf16"], "give one of the two"),
                ([self.step, "--device", "tpu"], "--device tpu"),
                ([self.step, "--cache-dtype", "f16"], "--cache-dtype f16: expected bf16 or f32"),
                ([self.step, "--cache-dtype", "bf16", "--no-cache"], "give one of the two")]:
            sets = [] if "--set" in args else TINY  # --set takes every value after it
            rc, out, err = ein("sample", self.script, *args, *sets)
            self.assertEqual(rc, 1, (args, out, err))
            self.assertIn(message, err, args)
            for leak in LEAKS:
                self.assertNotIn(leak, err, args)
        # a quantized file of another model, read without allocating: its floats do not fit
        q = os.path.join(self.tmp, "other_q8_0.safetensors")
        rc, _, err = ein("quantize", self.step, "-o", q)
        self.assertEqual(rc, 0, err)
        rc, out, err = ein("sample", self.script, q, "--set", "D=64,L=1,H=2,T=16,B=4")
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("does not fit: parameter 'wpe.weight' is f32 [16, 64]: it cannot take a "
                      "f32 [16, 32] tensor", err)
        for leak in LEAKS:
            self.assertNotIn(leak, err)
        # a script without fn logits
        rc, out, err = ein("sample", os.path.join(EXAMPLES, "scripts", "linear_regression.ein"))
        self.assertEqual(rc, 1, (out, err))
        for leak in LEAKS:
            self.assertNotIn(leak, err)


def main():
    global EIN, EXAMPLES
    EIN, EXAMPLES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]], verbosity=2)


if __name__ == "__main__":
    main()
