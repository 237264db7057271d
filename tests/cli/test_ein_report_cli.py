#!/usr/bin/env python3
"""`ein report` end to end: the stdlib GPT-2 small and LLaMA-7B parameter counts
(accounting_cases.tsv), nanoGPT's forward matmul FLOPs for GPT-2 124M at T=1024, a tiny GPT's
forward FLOPs equal to `ein emit --stage cost`, backward about twice the forward, the
documented JSON keys, the text conventions header, markdown, HTML with inline SVG charts
(rendered in headless Chromium when it is installed), the 124M report's time (< 1 s), and the
errors (exit 1, a clear message).

Usage: test_ein_report_cli.py EIN_BINARY EXAMPLES_DIR

Standard library only.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

EIN = None       # set from argv in main()
EXAMPLES = None
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped",
         "Traceback")
TINY = ["--set", "D=32", "--set", "L=1", "--set", "H=2", "--set", "T=16", "--set", "B=4"]


def ein(*args, timeout=120):
    p = subprocess.run([EIN, *args], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def script(name):
    return os.path.join(EXAMPLES, "scripts", name)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Report(unittest.TestCase):
    def ok(self, *args):
        rc, out, err = ein(*args)
        self.assertEqual(rc, 0, " ".join(args) + "\n" + err)
        return out

    def json(self, *args):
        return json.loads(self.ok("report", *args, "--format", "json"))

    def fails(self, args, *texts):
        rc, out, err = ein(*args)
        self.assertEqual(rc, 1, " ".join(args) + "\n" + out + err)
        for t in texts:
            self.assertIn(t, err)
        for leak in LEAKS:
            self.assertNotIn(leak, err)

    def test_gpt2_small_parameters_and_time(self):
        start = time.monotonic()
        j = self.json(script("gpt2_small.ein"))
        elapsed = time.monotonic() - start
        print(f"\n  ein report gpt2_small.ein --format json: {elapsed:.3f} s", file=sys.stderr)
        self.assertLess(elapsed, 1.0)  # the acceptance: a 124M report under a second
        self.assertEqual(j["params"]["total"], 124439808)  # params_gpt2_small_hf
        self.assertEqual(j["params"]["trainable"], 124439808)
        self.assertEqual(j["params"]["embedding_names"], ["wte.weight"])
        self.assertEqual(j["params"]["embedding"], 50257 * 768)
        self.assertTrue(any("wte.weight" in t for t in j["params"]["tied"]))
        # flops_nanogpt_fwd_T1024: 291,648,307,200 FLOPs per sequence (weight matmuls, attention,
        # lm_head); the stdlib GPT has biases, which nanoGPT's count leaves out, and B = 8.
        self.assertEqual(j["flops"]["forward_matmul"], 8 * 291648307200)
        self.assertEqual(j["attention"], {"layers": 12, "heads": 12, "head_dim": 64, "seq": 1024})
        self.assertAlmostEqual(j["flops"]["palm_per_token"], 6 * 124439808 + 12 * 12 * 12 * 64 * 1024)
        self.assertEqual(j["step"], {"batch": 8, "tokens": 8192})
        # The tied head, b t d x v d -> b t v, as factors, and its location in stdlib/gpt.ein.
        head = [r for r in j["rows"] if r["formula"] == "2·8·1024·50257·768"]
        self.assertEqual(len(head), 1, [r["formula"] for r in j["rows"] if r["formula"]][:5])
        self.assertTrue(head[0]["location"].endswith("gpt.ein:47:12"), head[0]["location"])
        self.assertEqual(head[0]["forward_flops"], 2 * 8 * 1024 * 50257 * 768)

    def test_llama_7b_parameters(self):
        j = self.json(script("llama_7b.ein"))
        self.assertEqual(j["params"]["total"], 6738415616)  # params_llama1_7b
        self.assertEqual(j["params"]["embedding_names"], ["tok_embeddings.weight"])
        self.assertEqual(j["attention"]["heads"], 32)
        self.assertEqual(j["attention"]["layers"], 32)
        # 16 B/param (fp32 AdamW) for 6.7 B parameters does not fit one 80 GB H100.
        self.assertFalse(j["memory"]["fits"])
        self.assertEqual(j["memory"]["params"], 4 * 6738415616)

    def test_forward_equals_emit_cost_and_backward_about_twice(self):
        j = self.json(script("gpt2_small.ein"), *TINY)
        out = self.ok("emit", script("gpt2_small.ein"), *TINY, "--stage", "cost")
        total = re.search(r"^\s*total\s+(\d+)", out, re.M)
        self.assertIsNotNone(total, out[-500:])
        self.assertEqual(j["flops"]["forward"], int(total.group(1)))
        ratio = j["flops"]["backward"] / j["flops"]["forward"]
        self.assertGreater(ratio, 1.5)
        self.assertLess(ratio, 2.5)
        self.assertEqual(j["flops"]["per_step"], j["flops"]["forward"] + j["flops"]["backward"])
        self.assertEqual(j["flops"]["backward"],
                         j["flops"]["backward_input"] + j["flops"]["backward_weight"])
        # Rows add up to the totals (every backward node attributed, or listed as uncounted).
        self.assertEqual(sum(r["forward_flops"] for r in j["rows"]), j["flops"]["forward"])
        if not j["uncounted"]:
            self.assertEqual(sum(r["backward_input_flops"] + r["backward_weight_flops"]
                                 for r in j["rows"]), j["flops"]["backward"])

    def test_json_keys(self):
        j = self.json(script("gpt2_small.ein"), *TINY, "--tokens", "1e9", "--gpus", "8")
        for path in ("params.total", "params.trainable", "params.embedding", "params.non_embedding",
                     "flops.forward", "flops.backward", "flops.per_step", "flops.per_token",
                     "memory.params", "memory.grads", "memory.optimizer", "memory.activations",
                     "memory.total", "memory.fits", "memory.max_batch_per_device", "time.days",
                     "time.gpu_hours", "time.tokens_per_param"):
            node = j
            for key in path.split("."):
                self.assertIn(key, node, path)
                node = node[key]
        m = j["memory"]
        self.assertAlmostEqual(m["total"], m["params"] + m["grads"] + m["optimizer"] + m["activations"])
        self.assertEqual(m["optimizer"], 2 * m["params"])  # AdamW: two fp32 states
        self.assertNotIn("time", self.json(script("gpt2_small.ein"), *TINY))

    def test_text_and_markdown(self):
        out = self.ok("report", script("gpt2_small.ein"), *TINY, "--tokens", "1e9")
        self.assertTrue(out.splitlines()[2] == "Conventions", out[:300])
        for text in ("2 per multiply-add", "Causal attention", "Recomputation", "Memory ledger",
                     "6N without embeddings", "PaLM", "days", "Chinchilla",
                     "stdlib/gpt.ein:", "[blocks.0.attn]"):
            self.assertIn(text, out)
        collapsed = self.ok("report", script("gpt2_small.ein"), *TINY, "--depth", "1")
        self.assertIn("[blocks]", collapsed)
        self.assertNotIn("[blocks.0.attn]", collapsed)
        md = self.ok("report", script("gpt2_small.ein"), *TINY, "--format", "md")
        self.assertIn("## Conventions", md)
        self.assertIn("| convention | per token | per step | note |", md)

    def test_html(self):
        tmp = tempfile.mkdtemp(prefix="ein-report-")
        try:
            path = os.path.join(tmp, "report.html")
            self.ok("report", script("gpt2_small.ein"), *TINY, "--format", "html", "-o", path)
            with open(path) as f:
                html = f.read()
            self.assertTrue(html.startswith("<!DOCTYPE html>"))
            for chart in ('<svg id="roofline"', '<svg id="memory"', '<svg id="share"'):
                self.assertIn(chart, html)
            self.assertNotIn("<script", html)  # self-contained, static
            self.assertNotIn("http://www.w3.org/2000/svg\" src", html)
            browser = chromium()
            if browser is None:
                print("\n  chromium not installed: skipping the headless render "
                      "(scripts/install_deps.sh installs it)", file=sys.stderr)
                return
            p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                                "--dump-dom", "file://" + path],
                               capture_output=True, timeout=120)
            dom = p.stdout.decode(errors="replace")
            self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace")[-2000:])
            self.assertEqual(dom.count("<svg"), 3, dom[:500])
            self.assertGreater(dom.count('class="point"'), 10)
            self.assertGreater(dom.count('class="segment"'), 3)
            png = os.path.join(tmp, "shot.png")
            p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                                "--screenshot=" + png, "--window-size=1280,2000", "file://" + path],
                               capture_output=True, timeout=120)
            self.assertTrue(os.path.exists(png) and os.path.getsize(png) > 10000,
                            p.stderr.decode(errors="replace")[-2000:])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_errors(self):
        gpt = script("gpt2_small.ein")
        self.fails(["report", gpt, "--hw", "tpu"], "unknown hardware 'tpu'", "h100")
        self.fails(["report", gpt, "--set", "Q=3"], "--set Q=3", "no dim or let named 'Q'")
        self.fails(["report", gpt, "--set", "D"], "--set D: expected NAME=VALUE")
        self.fails(["report", gpt, "--fn", "nope"], "--fn nope", "train.loss")
        self.fails(["report", gpt, "--format", "pdf"], "--format pdf")
        self.fails(["report", gpt, "--mfu", "1.5"], "--mfu 1.5")
        self.fails(["report", gpt, "--tokens", "lots"], "--tokens")
        self.fails(["report", os.path.join(EXAMPLES, "no_such.ein")], "no_such.ein")


def main():
    global EIN, EXAMPLES
    EIN, EXAMPLES = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=1)


if __name__ == "__main__":
    main()
