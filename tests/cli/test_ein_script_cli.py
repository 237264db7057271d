#!/usr/bin/env python3
"""`ein check`, `ein run` and `ein train` on .ein scripts, end to end: the lecture's linear
regression converges to arange(16) (read back from the checkpoint), Cruncher's parameter
table, AdaGrad on Cruncher, a resumed GPT run repeats the uninterrupted one bit for bit, a run
killed with SIGKILL resumes from its last good checkpoint (and skips a truncated one), the
accounting against `ein report`, mixed precision, `ein run` of the GPT's logits, and
stdlib/llama.ein (the tiny LLaMA's parameter table and falling loss, RoPE against a reference)
and einmix.ein. `ein run`'s printing and the scripts, sizes and files ein refuses are
test_ein_script_input_cli.py's; both share this file's helpers and Case.

Usage: test_ein_script_cli.py EIN_BINARY EXAMPLES_DIR

Standard library only; every run is small (about half a minute in all on 2 cores).
"""

import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

EIN = None       # set from argv in main()
EXAMPLES = None
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped",
         "Traceback")
# A GPT small enough for a few milliseconds a step.
TINY = ["--set", "D=32", "--set", "L=1", "--set", "H=2", "--set", "T=16", "--set", "B=4"]


def ein(*args, timeout=120):
    p = subprocess.run([EIN, *args], capture_output=True, timeout=timeout)
    # The GPT sample is raw bytes, not necessarily UTF-8.
    return (p.returncode, p.stdout.decode(errors="replace"),
            p.stderr.decode(errors="replace"))


def script(*parts):
    return os.path.join(EXAMPLES, *parts)


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_safetensors(path):
    """{name: (shape, [float])} for the f32 tensors of a safetensors file: an 8-byte
    little-endian header length, the JSON header, then the raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info)
        begin, end = info["data_offsets"]
        out[name] = (info["shape"], list(struct.unpack(f"<{(end - begin) // 4}f",
                                                       data[begin:end])))
    return out


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ein-script-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def write(self, name, text):
        """A file `name` with `text` in the test's directory; its path."""
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def ok(self, *args):
        rc, out, err = ein(*args)
        self.assertEqual(rc, 0, " ".join(args) + "\n" + err)
        return out, err

    def fails(self, args, *texts):
        """Exit 1 (a user error, not a crash: no 3, 134, 139), with every text in stderr."""
        rc, out, err = ein(*args)
        self.assertEqual(rc, 1, " ".join(args) + "\n" + out + err)
        for t in texts:
            self.assertIn(t, err)
        for leak in LEAKS:
            self.assertNotIn(leak, err)
        return err


class FusedAttention(Case):
    # The attention of the GPT and LLaMA scripts runs as one FlashAttention kernel
    # (docs/attention.md); 20 training steps give the losses of the unfused chain
    # (EIN_ATTENTION=unfused), within float rounding.
    def losses(self, path, attention, *args):
        log = self.path(f"{os.path.basename(path)}-{attention}.jsonl")
        env = dict(os.environ, EIN_ATTENTION=attention)
        p = subprocess.run([EIN, "train", path, "--steps", "20", "--log", log, "--quiet", *args],
                           capture_output=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        return [line["loss"] for line in read_log(log) if "loss" in line]

    def check(self, path, *args):
        out, _ = self.ok("emit", path, "--stage", "fused", *args)
        self.assertIn("attention fused:", out)
        self.assertNotIn("attention not fused", out)
        fused, unfused = self.losses(path, "fused", *args), self.losses(path, "unfused", *args)
        self.assertEqual(len(fused), 20)
        for step, (a, b) in enumerate(zip(fused, unfused)):
            self.assertLess(abs(a - b), 1e-4 * abs(b), f"step {step}: {a} against {b}")
        self.assertLess(fused[-1], fused[0])

    def test_gpt(self):
        self.check(script("gpt", "byte_gpt.ein"), "--set", "T=48", "--set", "B=4")

    def test_llama(self):
        self.check(script("scripts", "llama_tiny.ein"))

    def test_llama_grouped_query(self):
        # kv_heads = 2 of 4: k and v read per group by the fused kernel (no repeat copies).
        with open(script("scripts", "llama_tiny.ein")) as f:
            text = f.read()
        corpus = script("gpt", "corpus.txt")
        text = text.replace('"../gpt/corpus.txt"', json.dumps(corpus))
        text = text.replace("Llama(V, T, L, H, D, F)", "Llama(V, T, L, H, D, F, kv_heads = 2)")
        self.assertIn("kv_heads = 2", text)
        path = self.path("llama_gqa.ein")
        with open(path, "w") as f:
            f.write(text)
        self.check(path)


class Bf16Steps(Case):
    # bf16 GEMMs go to oneDNN's matmul with bf16 operands (runtime/blas/gemm.h), split over
    # the threads: two runs give the same losses, bit for bit, close to f32's.
    def test_bf16_training_is_deterministic_and_close_to_f32(self):
        gpt = script("gpt", "byte_gpt.ein")
        runs = {}
        for name, precision in (("a", "bf16"), ("b", "bf16"), ("f32", "fp32")):
            log = self.path(f"{name}.jsonl")
            self.ok("train", gpt, "--steps", "6", "--precision", precision, "--log", log, "--quiet")
            runs[name] = [line["loss"] for line in read_log(log)]
        self.assertEqual(runs["a"], runs["b"])
        for bf, f in zip(runs["a"], runs["f32"]):
            self.assertLess(abs(bf - f), 0.05 * f)


class Quiet(Case):
    # --quiet leaves the summary only: no progress line and no sample (the sample is printed
    # without it).
    def test_quiet_prints_the_summary_and_no_sample(self):
        gpt = script("gpt", "byte_gpt.ein")
        out, err = self.ok("train", gpt, "--steps", "2", "--quiet")
        self.assertIn("trained", out)
        self.assertNotIn("sample:", out)
        self.assertNotIn("step 2/2", err)
        out, _ = self.ok("train", gpt, "--steps", "2")
        self.assertIn("sample:", out)


class LinearRegression(Case):
    def test_converges_to_arange(self):
        ck, log = self.path("ck"), self.path("log.jsonl")
        self.ok("train", script("scripts", "linear_regression.ein"), "--checkpoint", ck,
                "--log", log, "--quiet")
        rows = read_log(log)
        self.assertEqual([r["step"] for r in rows], list(range(1, 301)))
        self.assertLess(rows[-1]["loss"], 1e-4)
        with open(os.path.join(ck, "latest")) as f:
            latest = f.read().strip()
        self.assertEqual(latest, "step_300.safetensors")
        tensors = read_safetensors(os.path.join(ck, latest))
        shape, w = tensors["model.final.weight"]
        self.assertEqual(shape, [16, 1])
        for i, v in enumerate(w):
            self.assertAlmostEqual(v, float(i), delta=1e-2)

    def test_lecture_smaller_rate(self):
        log = self.path("log.jsonl")
        self.ok("train", script("scripts", "linear_regression.ein"), "--set", "lr=0.01",
                "--steps", "1500", "--log", log, "--quiet")
        rows = read_log(log)
        self.assertEqual(len(rows), 1500)
        self.assertEqual(rows[-1]["lr"], 0.01)
        self.assertLess(rows[-1]["loss"], 1e-4)


class Cruncher(Case):
    def table(self, out):
        return {m.group(1): int(m.group(2))
                for m in re.finditer(r"^(\S+)\s+(?:f32\[[\d ]+\]\s+)?(\d+)$", out, re.M)}

    def test_parameter_table(self):
        out, _ = self.ok("check", script("scripts", "cruncher.ein"))
        self.assertIn("8256 parameters", out)
        self.assertEqual(self.table(out), {"layers.0.weight": 4096, "layers.1.weight": 4096,
                                           "final.weight": 64, "total": 8256})
        self.assertRegex(out, r"layers\.0\.weight\s+f32\[64 64\]")
        self.assertRegex(out, r"final\.weight\s+f32\[64 1\]")

    def test_parameter_table_d16(self):
        out, _ = self.ok("check", script("scripts", "cruncher.ein"), "--set", "D=16")
        self.assertEqual(self.table(out), {"layers.0.weight": 256, "layers.1.weight": 256,
                                           "final.weight": 16, "total": 528})

    def test_adagrad_loss_falls(self):
        log = self.path("log.jsonl")
        out, _ = self.ok("train", script("scripts", "cruncher_adagrad.ein"), "--log", log,
                         "--quiet")
        rows = read_log(log)
        self.assertEqual(len(rows), 100)
        self.assertLess(rows[-1]["loss"], rows[0]["loss"] / 10)
        self.assertIn("for 100 steps (0 to 100)", out)


class Resume(Case):
    def test_resumed_losses_are_bit_identical(self):
        gpt = script("gpt", "byte_gpt.ein")
        log_a, log_b, ck = self.path("a.jsonl"), self.path("b.jsonl"), self.path("ck")
        self.ok("train", gpt, *TINY, "--steps", "8", "--log", log_a, "--quiet")
        self.ok("train", gpt, *TINY, "--steps", "4", "--checkpoint", ck, "--quiet")
        self.assertTrue(os.path.exists(os.path.join(ck, "step_4.safetensors")))
        _, err = self.ok("train", gpt, *TINY, "--resume", "--steps", "8", "--checkpoint", ck,
                         "--log", log_b, "--quiet")
        self.assertIn("resumed from", err)
        self.assertIn("(step 4)", err)
        a, b = read_log(log_a), read_log(log_b)
        self.assertEqual([r["step"] for r in b], [5, 6, 7, 8])
        # Parsed from the shortest round-trip text, equal doubles are equal bits.
        self.assertEqual([r["loss"] for r in b], [r["loss"] for r in a[4:]])
        self.assertEqual([r["lr"] for r in b], [r["lr"] for r in a[4:]])


class Kill(Case):
    def test_sigkill_then_resume_and_skip_truncated(self):
        # The example with a checkpoint every 2 steps and no sample, next to its corpus.
        with open(script("gpt", "byte_gpt.ein")) as f:
            text = f.read()
        self.assertIn("checkpoint_every = 200", text)
        self.assertIn("sample_length = 300", text)
        text = text.replace("checkpoint_every = 200", "checkpoint_every = 2")
        text = text.replace("sample_length = 300", "sample_length = 0")
        gpt = self.path("gpt.ein")
        with open(gpt, "w") as f:
            f.write(text)
        shutil.copy(script("gpt", "corpus.txt"), self.path("corpus.txt"))
        ck = self.path("ck")

        p = subprocess.Popen([EIN, "train", gpt, *TINY, "--steps", "1000000", "--checkpoint",
                              ck, "--quiet"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while not os.path.exists(os.path.join(ck, "latest")):
                self.assertIsNone(p.poll(), "ein train ended before its first checkpoint")
                self.assertLess(time.time(), deadline, "no checkpoint within 60 s")
                time.sleep(0.01)
            time.sleep(0.2)  # well into later checkpoints: the kill may land mid-write
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        self.assertEqual(p.returncode, -signal.SIGKILL)

        steps = sorted(int(m.group(1)) for f in os.listdir(ck)
                       if (m := re.fullmatch(r"step_(\d+)\.safetensors", f)))
        self.assertTrue(steps, os.listdir(ck))
        last = steps[-1]
        log = self.path("log.jsonl")
        _, err = self.ok("train", gpt, *TINY, "--resume", "--steps", str(last + 3),
                         "--checkpoint", ck, "--log", log, "--quiet")
        m = re.search(r"resumed from (\S+) \(step (\d+)\)", err)
        self.assertTrue(m, err)
        resumed = int(m.group(2))
        self.assertIn(resumed, steps)
        self.assertGreaterEqual(resumed, 2)
        self.assertEqual(resumed % 2, 0)
        rows = read_log(log)
        self.assertEqual([r["step"] for r in rows], list(range(resumed + 1, last + 4)))
        final = os.path.join(ck, f"step_{last + 3}.safetensors")
        self.assertTrue(os.path.exists(final))

        # A truncated newest checkpoint: --resume skips it and takes the one before.
        with open(final, "r+b") as f:
            f.truncate(1000)
        _, err = self.ok("train", gpt, *TINY, "--resume", "--steps", str(last + 5),
                         "--checkpoint", ck, "--quiet")
        self.assertIn("skipped", err)
        self.assertIn(f"step_{last + 3}.safetensors", err)
        m = re.search(r"resumed from (\S+) \(step (\d+)\)", err)
        self.assertTrue(m, err)
        self.assertLess(int(m.group(2)), last + 3)
        self.assertGreaterEqual(int(m.group(2)), resumed)


class Accounting(Case):
    # One definition of model FLOPs: what ein train counts in a step is what ein report
    # predicts, exactly, under each save/recompute plan; recomputation, the update and the
    # batch function are counted on lines of their own.
    SIZES = ["--set", "D=64", "--set", "L=2", "--set", "H=4", "--set", "T=32", "--set", "B=8"]

    def test_train_counts_what_report_predicts(self):
        gpt = script("gpt", "byte_gpt.ein")
        # fp32, and bf16 as ein train runs it (f32 weights read through bf16 casts, which the
        # backward reads saved; the report traces the step in bf16 too).
        # "auto 0.5": auto within --activation-budget 0.5 (contractions recomputed).
        for precision, plan in [(p, plan) for p in ("fp32", "bf16")
                                for plan in ("none", "auto", "blocks", "auto 0.5")]:
            policy, *budget = plan.split()
            flags = ["--recompute", policy] + (["--activation-budget", budget[0]] if budget else [])
            log = self.path(f"{precision}-{policy}{''.join(budget)}.jsonl")
            self.ok("train", gpt, *self.SIZES, "--steps", "3", *flags,
                    "--precision", precision, "--log", log, "--quiet")
            out, _ = self.ok("report", gpt, *self.SIZES, *flags,
                             "--precision", precision, "--format", "json")
            report = json.loads(out)
            self.assertEqual(report["memory"]["compute"], precision)
            what = f"{precision} {plan}"
            flops = report["flops"]
            # Memory too: the allocator's peak in a step against the report's liveness of the
            # same fused graphs (parameters, optimizer state, activations, gradients so far).
            # The issue asks for 10%; what the liveness cannot see (the token batches, BLAS
            # scratch) is 0.3% here (12 KB). A reshape the executor copies (the attention's
            # output, whose rows hold the logsumexp too, as the projection reads it) counts as
            # a buffer of its own: taken for a view, it made `blocks` 2.1% above.
            predicted = report["memory"]["step_peak"]
            for line in read_log(log)[1:]:
                self.assertLess(abs(line["peak_memory"] / predicted - 1), 0.01,
                                f"{what}: measured {line['peak_memory']} predicted {predicted}")
            for line in read_log(log):
                self.assertEqual(line["flops"], flops["per_step"], what)
                self.assertEqual(line["recompute_flops"], flops["recompute"], what)
                self.assertGreater(line["optimizer_flops"], 0)
                self.assertEqual(line["data_flops"], 0)  # token windows: no fn batch
            if plan == "none":
                # No forward node is rebuilt; the fused attention's backward still recomputes
                # its logits tile by tile (q·kᵀ, scale, exp: 2·e + 2 FLOPs per logit).
                a = report["attention"]
                logits = a["layers"] * 8 * a["heads"] * a["seq"] ** 2  # B = 8
                self.assertEqual(flops["recompute"], logits * (2 * a["head_dim"] + 2))
            if plan == "blocks":
                self.assertGreater(flops["recompute"], 0)
            if plan == "auto 0.5":
                # Recomputing contractions changes no fp32 loss: the backward rebuilds them
                # from the same operands with the same kernels. In bf16 a value rebuilt from
                # bf16 activations may differ from the forward's by that rounding.
                auto_log = read_log(self.path(f"{precision}-auto.jsonl"))
                losses = [x["loss"] for x in read_log(log)]
                if precision == "fp32":
                    self.assertEqual(losses, [x["loss"] for x in auto_log], what)
                for a, b in zip(losses, [x["loss"] for x in auto_log]):
                    self.assertAlmostEqual(a, b, delta=0.02, msg=what)
                plans = report["memory"]["recompute_plans"]
                chosen = next(p for p in plans if p["chosen"])
                auto = next(p for p in plans if p["policy"] == "auto" and not p["chosen"])
                self.assertEqual(chosen["activation_budget"], 0.5)
                self.assertLess(chosen["saved_activations"], auto["saved_activations"], what)
                self.assertGreater(chosen["recompute_matmul_flops"],
                                   chosen["kernel_recompute_matmul_flops"], what)
                if precision == "fp32":
                    self.assertLessEqual(chosen["saved_activations"],
                                         0.5 * auto["saved_activations"], what)

    def test_a_fused_head_counts_what_report_predicts(self):
        # GPT-2's 50257-class tied head runs fused with its cross-entropy and computes its
        # gradients in the forward (graph.h's CrossEntropyAttr): counted as backward work, by
        # ein train as by ein report, its logits made once (no recomputation of them), and the
        # step's peak (the head's dw made in the forward included) as the liveness predicts.
        gpt = script("scripts", "gpt2_small.ein")
        tokens = self.path("tokens.u16")
        with open(tokens, "wb") as f:
            f.write(struct.pack("<4000H", *[(i * 7919) % 50257 for i in range(4000)]))
        sizes = ["--set", "D=32", "--set", "L=1", "--set", "H=2", "--set", "T=16", "--set", "B=4"]
        for plan in ("none", "auto"):
            log = self.path(f"head-{plan}.jsonl")
            self.ok("train", gpt, *sizes, "--steps", "2", "--data", tokens, "--recompute", plan,
                    "--log", log, "--quiet")
            out, _ = self.ok("report", gpt, *sizes, "--recompute", plan, "--format", "json")
            report = json.loads(out)
            flops, memory = report["flops"], report["memory"]
            a = report["attention"]
            attention_logits = a["layers"] * 4 * a["heads"] * a["seq"] ** 2  # B = 4
            if plan == "none":  # only the fused attention's logits are made again
                self.assertEqual(flops["recompute"], attention_logits * (2 * a["head_dim"] + 2))
            for line in read_log(log):
                self.assertEqual(line["flops"], flops["per_step"], plan)
                self.assertEqual(line["recompute_flops"], flops["recompute"], plan)
                self.assertLess(abs(line["peak_memory"] / memory["step_peak"] - 1), 0.03, plan)


class Peak(Case):
    # MFU on a CPU is against the larger of the computed and the measured peak, or against
    # EIN_CPU_PEAK when the user gives one; a bad value is a clear error.
    def test_user_peak_and_its_errors(self):
        gpt = script("gpt", "byte_gpt.ein")
        log = self.path("log.jsonl")
        env = dict(os.environ, EIN_CPU_PEAK="1e12")
        r = subprocess.run([EIN, "train", gpt, *TINY, "--steps", "2", "--log", log, "--quiet"],
                           capture_output=True, text=True, errors="replace", env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        for line in read_log(log):
            self.assertAlmostEqual(line["mfu"], line["flops_per_s"] / 1e12, delta=1e-9)
        env["EIN_CPU_PEAK"] = "fast"
        r = subprocess.run([EIN, "train", gpt, *TINY, "--steps", "1", "--quiet"],
                           capture_output=True, text=True, errors="replace", env=env, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("EIN_CPU_PEAK=fast: expected a positive number of FLOP/s", r.stderr)


class Check(Case):
    # `ein check` traces each function with 8 for the dims nothing binds, then with a size of
    # its own for each (8, 16, 24, ...): a function that only traces when two dims of
    # different names are equal is an error, which a call with real sizes would also be.
    NOTE = "treats dims of different names as one"

    def test_dims_of_different_names_used_as_one(self):
        path = self.write("mixed.ein",
                          "fn proj(x: f32[b s d], w: f32[e f]) -> f32[b s f] = x @ w\n")
        err = self.fails(["check", path], "mixed.ein:1:53: error: '@' needs",
                         "(8, 16, 24) @ (32, 40)", self.NOTE, "b=8, s=16, d=24, e=32, f=40")
        self.assertIn(" x @ w\n", err)  # the caret's line
        path = self.write("bcast.ein", "fn add(x: f32[b s], y: f32[s b]) -> f32[b s] = x + y\n")
        self.fails(["check", path], self.NOTE, "b=8, s=16")
        # as a user would run it, with sizes that differ: the same mismatch
        self.fails(["run", path, "--shape", "2,3", "--shape", "3,2"], "bcast.ein:1:")

    def test_one_name_for_one_dim_and_sizes_that_divide(self):
        path = self.write("fine.ein",
                          "fn proj(x: f32[b s d], w: f32[d f]) -> f32[b s f] = x @ w\n"
                          "fn heads(x: f32[b c]) -> f32[b h k] =\n"
                          "  rearrange(x, \"b (h k) -> b h k\", h = 4)\n"
                          "fn one(x: f32[n]) -> f32[n] = x * 2.0\n"
                          # 8^16 elements is too many, with sizes of their own too: traced once
                          "fn wide(x: f32[a b c d e f g h i j k l m n o p]) = sum(x)\n")
        out, _ = self.ok("check", path)
        self.assertIn("ok (4 functions checked", out)


class Run(Case):
    def test_bf16_tracks_f32(self):
        # Mixed precision: bf16 activations, f32 master weights, gradients and AdamW state.
        # The stated tolerance (README): the mean of the last 10 losses of a 60-step run is
        # within 0.05 of the f32 run's.
        gpt = script("gpt", "byte_gpt.ein")
        means = {}
        for precision in ("fp32", "bf16"):
            log = self.path(f"{precision}.jsonl")
            self.ok("train", gpt, "--set", "D=64", "--set", "L=1", "--steps", "60",
                    "--precision", precision, "--log", log, "--quiet")
            with open(log) as f:
                losses = [json.loads(line)["loss"] for line in f]
            self.assertEqual(len(losses), 60)
            means[precision] = sum(losses[-10:]) / 10
        self.assertLess(means["fp32"], 4.0)  # it learned something
        self.assertLess(abs(means["bf16"] - means["fp32"]), 0.05, means)

    def test_llama_bf16_tracks_f32(self):
        # RoPE's tables are f32 (positions need more than bf16's 8 bits), so q and k come out of
        # it f32 while v is bf16: the attention's einsums run in bf16 as torch.autocast runs a
        # matmul (f32 operands cast to the compute dtype), recognised as one fused attention.
        llama = script("scripts", "llama_tiny.ein")
        means = {}
        for precision in ("fp32", "bf16"):
            log = self.path(f"llama_{precision}.jsonl")
            self.ok("train", llama, "--steps", "60", "--precision", precision, "--log", log,
                    "--quiet")
            losses = [line["loss"] for line in read_log(log)]
            self.assertEqual(len(losses), 60)
            means[precision] = sum(losses[-10:]) / 10
        self.assertLess(means["fp32"], 4.0)
        self.assertLess(abs(means["bf16"] - means["fp32"]), 0.05, means)

    def test_fp16_with_dynamic_loss_scaling(self):
        # fp16 activations with GradScaler's rule: overflowing steps are skipped and halve the
        # scale (65536 at first). The run still learns, within 0.1 of fp32 (the skipped steps
        # shift it a little).
        gpt = script("gpt", "byte_gpt.ein")
        logs = {}
        for precision in ("fp32", "fp16"):
            log = self.path(f"{precision}.jsonl")
            out, _ = self.ok("train", gpt, "--set", "D=64", "--set", "L=1", "--steps", "60",
                             "--precision", precision, "--log", log, "--quiet")
            with open(log) as f:
                logs[precision] = [json.loads(line) for line in f]
        fp16 = logs["fp16"]
        self.assertEqual(len(fp16), 60)
        self.assertEqual(fp16[0]["loss_scale"], 65536.0)
        skipped = sum(j["skipped"] for j in fp16)
        self.assertLessEqual(skipped, 10)
        self.assertIn(f"{skipped} step", out)
        scales = [j["loss_scale"] for j in fp16]
        self.assertTrue(all(b in (a, a / 2) for a, b in zip(scales, scales[1:])), scales)
        mean = {p: sum(j["loss"] for j in logs[p][-10:]) / 10 for p in logs}
        self.assertLess(abs(mean["fp16"] - mean["fp32"]), 0.1, mean)
        # With clip = 1.0 every step that updates logs its gradients' norm, fp16's unscaled: the
        # two runs' medians agree within 2x (scaled, fp16's would be thousands of times more).
        median = {}
        for p in logs:
            norms = sorted(j["grad_norm"] for j in logs[p] if not j.get("skipped"))
            self.assertEqual(len(norms), sum(not j.get("skipped") for j in logs[p]), p)
            median[p] = norms[len(norms) // 2]
        self.assertLess(max(median.values()) / min(median.values()), 2, median)

    def test_optimizer_state_initial_value(self):
        src = self.path("count.ein")
        with open(src, "w") as f:
            f.write("import nn\noptimizer Count(lr = 0.0) {\n  state n = 100\n"
                    "  fn update(p, g, t) {\n    n = n + 1\n    return p - lr * g\n  }\n}\n"
                    "dim D = 2\ntrain {\n  model = Linear(D, 1)\n  optimizer = Count()\n"
                    "  steps = 3\n  fn batch() = (randn(2, D), randn(2, 1))\n"
                    "  fn loss(x: f32[b D], y: f32[b 1]) -> f32[] = mean((model(x) - y) ** 2)\n}\n")
        ck = self.path("ck")
        self.ok("train", src, "--checkpoint", ck, "--quiet")
        tensors = read_safetensors(os.path.join(ck, "step_3.safetensors"))
        self.assertEqual(tensors["optim.optimizer.n.weight"][1], [103.0, 103.0])

    def test_gpt2_small_parameter_count(self):
        # accounting_cases.tsv, params_gpt2_small_hf: 124,439,808 (HF gpt2 checkpoint).
        out, _ = self.ok("check", script("scripts", "gpt2_small.ein"))
        total = [line for line in out.splitlines() if line.startswith("total")]
        self.assertEqual(total[0].split()[-1], "124439808")

    def test_llama_7b_parameter_count_without_allocating(self):
        # accounting_cases.tsv's LLaMA-7B figure, 6,738,415,616: 27 GB of f32 weights this
        # machine does not have, so ein check must not allocate them.
        out, _ = self.ok("check", script("scripts", "llama_7b.ein"))
        total = [line for line in out.splitlines() if line.startswith("total")]
        self.assertEqual(total[0].split()[-1], "6738415616")

    def test_check_of_a_deep_model_is_linear_in_its_depth(self):
        # Each traced attention used to be fused into a fresh copy of the whole graph: a
        # 256-layer byte-level GPT took 4.3 s to check and 512 layers 19 s; now every
        # attention is placed in one copy (compiler/fuse/rewrite.h), 0.8 s for 512 layers.
        # The budget leaves several times that for a slow machine (ten times more under ASan).
        slowdown = 10 if os.environ.get("EIN_SANITIZE") else 1
        start = time.monotonic()
        out, _ = self.ok("check", script("gpt", "byte_gpt.ein"), "--set", "L=512")
        elapsed = time.monotonic() - start
        total = [line for line in out.splitlines() if line.startswith("total")]
        d = 128
        block = 12 * d * d + 13 * d  # qkv, proj, the MLP's two, two LayerNorms
        self.assertEqual(total[0].split()[-1], str(512 * block + (256 + 64 + 2) * d))
        self.assertLess(elapsed, 4.0 * slowdown)

    def test_accounting_rows_from_the_stdlib_models(self):
        # accounting_cases.tsv's parameter rows, by --set on the two config scripts.
        rows = [("gpt2_small.ein", ["L=24", "D=1024", "H=16"], 354823168),
                ("gpt2_small.ein", ["L=36", "D=1280", "H=20"], 774030080),
                ("gpt2_small.ein", ["L=48", "D=1600", "H=25"], 1557611200),
                ("llama_7b.ein", ["D=5120", "L=40", "H=40", "F=13824"], 13015864320),
                ("llama_7b.ein", ["D=6656", "L=60", "H=52", "F=17920"], 32528943616),
                # grouped-query attention, 8 key/value heads
                ("llama_7b.ein", ["D=8192", "L=80", "H=64", "G=8", "F=28672"], 68976648192),
                ("llama_7b.ein", ["V=128256", "D=8192", "L=80", "H=64", "G=8", "F=28672"],
                 70553706496)]
        for name, sets, expected in rows:
            args = ["check", script("scripts", name)]
            for kv in sets:
                args += ["--set", kv]
            out, _ = self.ok(*args)
            total = [line for line in out.splitlines() if line.startswith("total")]
            self.assertEqual(int(total[0].split()[-1]), expected, (name, sets))

    def test_grouped_query_attention_runs(self):
        out, _ = self.ok("run", script("scripts", "llama_7b.ein"), "--fn", "train.loss",
                         "--set", "V=256", "--set", "T=16", "--set", "L=1", "--set", "H=4",
                         "--set", "G=2", "--set", "D=32", "--set", "F=64", "--set", "B=2")
        loss = outputs(out)[0][1][0]
        self.assertAlmostEqual(loss, math.log(256), delta=0.5)  # near-uniform at init

    def test_emit_script(self):
        gpt = script("gpt", "byte_gpt.ein")
        out, _ = self.ok("emit", gpt, *TINY, "--stage", "fused")
        self.assertIn("fused train.loss:", out)
        self.assertIn("kernel 1", out)
        out, _ = self.ok("emit", gpt, *TINY, "--fn", "train.logits", "--stage", "ir")
        self.assertIn("gather", out)
        self.assertIn("contract", out)

    def test_gpt_logits(self):
        out, _ = self.ok("run", script("gpt", "byte_gpt.ein"), "--fn", "train.logits", "--set",
                         "T=8", "--set", "D=16", "--set", "H=2", "--set", "L=1")
        self.assertIn("input 0: i64[1 8]", out)
        self.assertIn("output 0: f32[1 8 256]", out)


def write_safetensors(path, tensors, dtype="F32"):
    """Write {name: (shape, [value])} as F32 (or I64), in order (the format read_safetensors
    reads)."""
    code = {"F32": "f", "I64": "q"}[dtype]
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        b = struct.pack(f"<{len(values)}{code}", *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def outputs(out):
    """{i: (shape, [float])} of `ein run`'s "output i: f32[...] = tensor([...], shape=...)"
    lines (PyTorch's print rules: every value up to 1000 elements, 6 significant digits)."""
    res = {}
    for m in re.finditer(r"^output (\d+): \w+\[([\d ]*)\] = tensor\((.*?), shape=", out, re.M | re.S):
        vals = [float(v) for v in re.findall(r"-?(?:inf|nan|\d+\.?\d*(?:e[-+]?\d+)?)", m.group(3))]
        res[int(m.group(1))] = ([int(d) for d in m.group(2).split()], vals)
    return res


class Llama(Case):
    """stdlib/llama.ein (RMSNorm, RoPE, SwiGLU, untied head) through the tiny example, and
    stdlib/einmix.ein."""

    def table(self, out):
        return {m.group(1): int(m.group(2))
                for m in re.finditer(r"^(\S+)\s+(?:f32\[[\d ]+\]\s+)?(\d+)$", out, re.M)}

    def test_parameter_table(self):
        out, _ = self.ok("check", script("scripts", "llama_tiny.ein"))
        V, L, D, F = 256, 2, 64, 172
        want = {"tok_embeddings.weight": V * D, "norm.weight": D, "output.weight": D * V}
        for i in range(L):
            for w in ("wq", "wk", "wv", "wo"):
                want[f"layers.{i}.attention.{w}.weight"] = D * D
            for w in ("w1", "w2", "w3"):
                want[f"layers.{i}.feed_forward.{w}.weight"] = D * F
            want[f"layers.{i}.attention_norm.weight"] = D
            want[f"layers.{i}.ffn_norm.weight"] = D
        total = 2 * V * D + D + L * (4 * D * D + 3 * D * F + 2 * D)
        self.assertEqual(total, 131904)
        want["total"] = total
        self.assertEqual(self.table(out), want)
        self.assertIn(f"{total} parameters", out)
        self.assertRegex(out, r"layers\.0\.feed_forward\.w1\.weight\s+f32\[64 172\]")
        self.assertRegex(out, r"layers\.1\.feed_forward\.w2\.weight\s+f32\[172 64\]")
        self.assertRegex(out, r"output\.weight\s+f32\[64 256\]")

    def test_loss_falls(self):
        log = self.path("log.jsonl")
        self.ok("train", script("scripts", "llama_tiny.ein"), "--steps", "20", "--log", log,
                "--quiet")
        rows = read_log(log)
        self.assertEqual([r["step"] for r in rows], list(range(1, 21)))
        losses = [r["loss"] for r in rows]
        # Starts near ln 256 = 5.55 (uniform over bytes); about 3.5 after 20 steps.
        self.assertAlmostEqual(losses[0], 5.545, delta=0.3)
        self.assertLess(sum(losses[-3:]) / 3, losses[0] - 1.0, losses)

    def test_rope_matches_reference(self):
        # Meta's apply_rotary_emb: consecutive pairs (x[2i], x[2i+1]) rotate by
        # pos · 10000^(-2i/e); x is (b h t e) = (1 2 4 8).
        x = [round(math.sin(0.7 * i + 0.3) * 2, 3) for i in range(64)]
        inputs = self.path("x.safetensors")
        write_safetensors(inputs, {"x": ([1, 2, 4, 8], x)})
        src = self.path("rope.ein")
        with open(src, "w") as f:
            f.write("import llama\n"
                    "fn f(x: f32[1 2 4 8]) {\n"
                    "  y = rope(x)\n"
                    "  return y[0, 0, 0], y[0, 0, 1], y[0, 0, 3], y[0, 1, 2]\n"
                    "}\n")
        out, _ = self.ok("run", src, "--fn", "f", "--inputs", inputs)
        got = outputs(out)
        for i, (h, t) in enumerate([(0, 0), (0, 1), (0, 3), (1, 2)]):
            row = x[(h * 4 + t) * 8:(h * 4 + t + 1) * 8]
            want = []
            for j in range(4):
                angle = t * 10000.0 ** (-2 * j / 8)
                c, s = math.cos(angle), math.sin(angle)
                want += [row[2 * j] * c - row[2 * j + 1] * s, row[2 * j] * s + row[2 * j + 1] * c]
            shape, vals = got[i]
            self.assertEqual(shape, [8])
            for g, w in zip(vals, want, strict=True):
                self.assertAlmostEqual(g, w, delta=1e-5 * max(1.0, abs(w)), msg=(h, t, out))

    def test_einmix_shapes(self):
        src = self.path("mix.ein")
        with open(src, "w") as f:
            f.write("import einmix\n"
                    "dim B = 2\ndim T = 5\ndim C = 3\n"
                    "let mc = MixChannels(C, 7)\n"
                    "let mcb = MixChannelsBias(7, 6)\n"
                    "let mt = MixTokens(T, 4)\n"
                    "let mtb = MixTokensBias(4, 9)\n"
                    "fn channels(x: f32[B T C]) = mc(x)\n"
                    "fn mixer(x: f32[B T C]) = mtb(mt(mcb(mc(x))))\n")
        self.ok("check", src)
        out, _ = self.ok("run", src, "--fn", "channels")
        self.assertIn("input 0: f32[2 5 3]", out)
        self.assertIn("output 0: f32[2 5 7]", out)
        out, _ = self.ok("run", src, "--fn", "mixer")
        self.assertIn("output 0: f32[2 9 6]", out)

    def test_einmix_builtin_trains_a_mixer(self):
        # examples/scripts/mixer.ein: EinMix(...) layers as module members, named and shaped as
        # einops makes them, trained below the loss of predicting zeros (1/P = 0.0625).
        mixer = script("scripts", "mixer.ein")
        out, _ = self.ok("check", mixer)
        self.assertRegex(out, r"blocks\.0\.token_up\.weight\s+f32\[16 64\]\s+1024")
        self.assertRegex(out, r"blocks\.0\.token_up\.bias\s+f32\[1 64 1\]\s+64")
        self.assertRegex(out, r"blocks\.1\.channel_down\.bias\s+f32\[1 1 32\]\s+32")
        self.assertIn("12896 parameters", out)
        log = self.path("mixer.jsonl")
        self.ok("train", mixer, "--log", log, "--quiet")
        losses = [line["loss"] for line in read_log(log) if "loss" in line]
        self.assertGreater(losses[0], 0.5)
        self.assertLess(losses[-1], 0.05)

    def test_einmix_builtin_errors_point_into_its_strings(self):
        bad = self.write("bad_mix.ein", 'let mix = EinMix("b c_in -> b c_out", '
                         'weight_shape = "c_in c_out", c_in = 4)\n')
        err = self.fails(["check", bad], "bad_mix.ein:1:60: error: the size of weight axis 'c_out'")
        self.assertIn("\n" + " " * 60 + "^~~~~\n", err)
        misfit = self.write("misfit.ein", 'let mix = EinMix("b (h c) -> b (h d)", weight_shape = '
                            '"h c d", h = 2, c = 3, d = 4)\nfn f(x: f32[5 7]) = mix(x)\n')
        self.fails(["check", misfit], "misfit.ein:1:21: error: cannot split an axis of length 7",
                   "misfit.ein:2:21: note: in this call")


def main():
    global EIN, EXAMPLES
    EIN, EXAMPLES = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=1)


if __name__ == "__main__":
    main()
