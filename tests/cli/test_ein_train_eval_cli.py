#!/usr/bin/env python3
"""`ein train` with a held-out loss (the train block's eval_data, eval_every, eval_batches and
data's part = (begin, end)), end to end: text the model trains on scores low and text it never
saw scores high; the JSON log, the progress lines and the summary carry the eval loss at the
steps asked for, and its FLOPs are ein report's forward times the batches; --eval-every and
--eval-data override the block; a checkpoint carries its weights' eval loss, which ein sample
prints, --steps 0 evaluates the weights it starts from, and ein quantize --script scores the
held-out batches; the training losses are the
same with and without it; and every mistake in the settings is an error with a caret.

Usage: test_ein_train_eval_cli.py EIN_BINARY
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

EIN = None
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped")

SCRIPT = """import gpt
import optim

train {{
  model = GPT(256, 16, 1, 2, 32)
  data = bytes("text.txt", batch = 8, context = 16, part = (0, 0.9))
  {eval}
  optimizer = AdamW(lr = 1e-2)
  steps = 40
  log_every = 100
  fn loss(x: i64[8 16], y: i64[8 16]) -> f32[] = cross_entropy(model(x), y)
  fn logits(x: i64[1 16]) -> f32[1 16 256] = model(x)
}}
"""
HELD_OUT = ('eval_data = bytes("text.txt", batch = 8, context = 16, part = (0.9, 1))\n'
            '  eval_every = 15')


def ein(*args, timeout=300):
    p = subprocess.run([EIN, *args], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


class HeldOut(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ein_train_eval_cli_")
        # The first 90%: one sentence over and over, which a model learns in a few steps; the
        # last 10%: digits it never sees.
        text = ("the cat sat on the mat. " * 400)[:9000] + ("0123456789" * 100)
        with open(os.path.join(cls.tmp, "text.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(cls.tmp, "other.txt"), "w") as f:
            f.write("the cat sat on the mat. " * 400)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def write(self, name, held_out):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(SCRIPT.format(eval=held_out))
        return path

    def train(self, script, *args):
        log = os.path.join(self.tmp, "log.jsonl")
        rc, out, err = ein("train", script, "--log", log, *args)
        self.assertEqual(rc, 0, err)
        with open(log) as f:
            return [json.loads(line) for line in f], out, err

    def test_held_out_text_scores_what_it_is(self):
        steps, out, err = self.train(self.write("eval.ein", HELD_OUT))
        evals = {s["step"]: s["eval_loss"] for s in steps if "eval_loss" in s}
        self.assertEqual(sorted(evals), [15, 30, 40])  # every 15 steps, and after the last
        for s in steps:
            self.assertEqual("eval_ms" in s, s["step"] in evals)
        # The sentence is learnt; the digits, never seen, score far worse than it.
        self.assertLess(steps[-1]["loss"], 2.5)
        self.assertGreater(evals[40], steps[-1]["loss"] + 2)
        self.assertTrue(all(math.isfinite(v) for v in evals.values()))
        # The progress lines at those steps carry it, and the summary the last one. The
        # digits' part: 1000 bytes, 62 windows of 16 after the first, 7 batches of 8.
        for step in evals:
            self.assertIn(f"step {step}/40 | loss ", err)
        self.assertEqual(err.count("| eval loss "), 3, err)
        self.assertIn(f"eval loss {evals[40]:.6g} after step 40 (7 batches, 896 tokens held "
                      "out; 3 evaluations: ", out)
        # Each evaluation counts the loss's forward over its 7 batches: what ein report
        # predicts for the forward of one batch, 7 times, and prices as one evaluation.
        rc, report, err = ein("report", os.path.join(self.tmp, "eval.ein"), "--format", "json")
        self.assertEqual(rc, 0, err)
        report = json.loads(report)
        forward = report["flops"]["forward"]
        held = report["eval"]
        self.assertEqual((held["batches"], held["tokens"], held["every"], held["steps"],
                          held["evaluations"]), (7, 896, 15, 40, 3))
        self.assertEqual(held["flops_per_evaluation"], 7 * forward)
        self.assertAlmostEqual(held["fraction_of_training_flops"],
                               3 * 7 * forward / (40 * report["flops"]["per_step"]))
        for s in steps:
            if "eval_loss" in s:
                self.assertEqual(s["eval_flops"], held["flops_per_evaluation"], s)
        rc, text, err = ein("report", os.path.join(self.tmp, "eval.ein"))
        self.assertEqual(rc, 0, err)
        self.assertIn("each evaluation scores 7 batches (896 tokens) with fn loss's forward", text)
        # The HTML page has the same section.
        rc, html, err = ein("report", os.path.join(self.tmp, "eval.ein"), "--format", "html")
        self.assertEqual(rc, 0, err)
        self.assertIn("<h2>Held-out loss", html)
        self.assertIn("each evaluation scores 7 batches (896 tokens)", html)
        # A held-out part that cannot be read is not priced, and says why.
        rc, text, err = ein("report", self.write("unpriced.ein", HELD_OUT.replace(
            '"text.txt", batch = 8, context = 16, part = (0.9, 1)', '"none.txt", batch = 8, context = 16')))
        self.assertEqual(rc, 0, err)
        self.assertIn("not priced: data file", text)
        # The checkpoint of the last step carries its eval loss, and ein sample says it.
        ck = os.path.join(self.tmp, "ck")
        self.train(self.write("ck.ein", HELD_OUT), "--checkpoint", ck)
        rc, text, err = ein("sample", os.path.join(self.tmp, "ck.ein"), ck, "--length", "5")
        self.assertEqual(rc, 0, err)
        self.assertIn(f"step_40.safetensors (step 40, eval loss {evals[40]:.4g})", err)
        # --steps 0 from those weights evaluates them alone (nanoGPT's eval_only): the same loss.
        step40 = os.path.join(ck, "step_40.safetensors")
        zero, out, _ = self.train(self.write("ck.ein", HELD_OUT), "--init", step40, "--steps", "0")
        self.assertEqual(zero, [])  # no step, no log line
        self.assertIn(f"eval loss {evals[40]:.6g} after step 0 (7 batches", out)
        # ein quantize --script scores the block's held-out batches: as trained, the same loss.
        rc, out, err = ein("quantize", step40, "--script", os.path.join(self.tmp, "ck.ein"),
                           "--batches", "7")
        self.assertEqual(rc, 0, err)
        self.assertIn(f"ck.ein's eval_data: {evals[40]:.6f} as trained", out)
        # The same training without the held-out loss: the same losses, bit for bit.
        plain, _, _ = self.train(self.write("plain.ein", ""))
        self.assertEqual([s["loss"] for s in plain], [s["loss"] for s in steps])
        self.assertFalse(any("eval_loss" in s for s in plain))

    def test_flags_override_the_block(self):
        script = self.write("flags.ein", HELD_OUT)
        other = os.path.join(self.tmp, "other.txt")
        steps, out, _ = self.train(script, "--eval-every", "0", "--eval-data", other,
                                   "--steps", "20")
        evals = [s for s in steps if "eval_loss" in s]
        self.assertEqual([s["step"] for s in evals], [20])  # after the last step only
        # other.txt is the training sentence again (its last 10%, 960 bytes: 59 windows of
        # 16, 7 batches of 8): learnt text scores low.
        self.assertLess(evals[0]["eval_loss"], steps[0]["loss"] - 1)
        self.assertIn("(7 batches, 896 tokens held out; 1 evaluation: ", out)

    def test_mistakes_point_at_the_setting(self):
        cases = [
            ('eval_data = bytes("text.txt", batch = 8, context = 16, part = (0.9))',
             "part is (begin, end)"),
            ('eval_data = bytes("text.txt", batch = 8, context = 16, part = (0.5, 0.2))',
             "0 <= begin < end <= 1"),
            ('eval_data = bytes("text.txt", batch = 8, context = 16, part = (0, 2))',
             "0 <= begin < end <= 1"),
            ('eval_data = 3', "eval_data must be bytes(...) or tokens(...), got"),
            ('eval_data = warmup_cosine()', "eval_data must be bytes(...) or tokens(...)"),
            ('eval_data = bytes("text.txt", batch = 8, context = 16)\n  eval_every = -1',
             "train setting 'eval_every' must be an integer >= 0"),
            ('eval_data = bytes("text.txt", batch = 8, context = 16)\n  eval_batches = 0',
             "train setting 'eval_batches' must be an integer >= 1"),
            ('eval_data = bytes("missing.txt", batch = 8, context = 16)',
             "(set by the train block's eval_data; --eval-data overrides it)"),
            ('eval_data = bytes("text.txt", batch = 8, context = 16, part = (0.9999, 1))',
             "a window of context 16 needs 17"),
            ('eval_data = bytes("text.txt", batch = 500, context = 16, part = (0.9, 1))',
             "one pass holds fewer windows of 16 tokens than a batch of 500"),
            # fn loss takes batches of 8: a held-out batch of 4 fails at the start
            ('eval_data = bytes("text.txt", batch = 4, context = 16, part = (0.9, 1))',
             "note: the tensor is a batch of eval_data (4 x 16 tokens), set here"),
        ]
        for i, (setting, message) in enumerate(cases):
            script = self.write(f"bad{i}.ein", setting)
            rc, out, err = ein("train", script, "--steps", "1")
            self.assertEqual(rc, 1, (setting, out, err))
            self.assertIn(message, err, setting)
            self.assertIn(f"bad{i}.ein:", err, setting)  # file:line:col
            self.assertIn("^", err, setting)             # and a caret under the setting
            for leak in LEAKS:
                self.assertNotIn(leak, err, setting)
        rc, out, err = ein("train", self.write("none.ein", ""), "--eval-data", "x.txt")
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("--eval-data: the train block has no eval_data setting", err)


def main():
    global EIN
    EIN = sys.argv[1]
    unittest.main(argv=[sys.argv[0]], verbosity=2)


if __name__ == "__main__":
    main()
