#!/usr/bin/env python3
"""`ein train` under SIGINT and SIGTERM at random moments (while kernels compile, mid-step,
mid-checkpoint): every run exits with 128 + the signal (130, 143), never crashes, and leaves a
checkpoint that `--resume` loads; a second signal ends the run at once. The signals reach a
watcher thread only (api/stop_signals.h): before it, a handler running on a compute thread
corrupted the heap in about a third of the runs.

    test_ein_train_signals.py EIN EXAMPLES_DIR [--trials N] [--seed S]
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ein")
    p.add_argument("examples")
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    script = os.path.join(a.examples, "gpt", "byte_gpt.ein")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")  # a cold JIT cache: the early signals land mid-compile
        env = dict(os.environ, EIN_CACHE_DIR=cache)
        for trial in range(a.trials):
            sig = signal.SIGINT if trial % 2 == 0 else signal.SIGTERM
            delay = rng.uniform(0.05, 3.0)
            ck = os.path.join(tmp, f"ck{trial}")
            run = subprocess.Popen([a.ein, "train", script, "--checkpoint", ck],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            time.sleep(delay)
            run.send_signal(sig)
            out, err = run.communicate(timeout=120)
            what = f"trial {trial}: {sig.name} after {delay:.2f} s"
            if run.returncode == -sig and not os.path.exists(ck):
                # The signal came while the process was still starting (the dynamic loader,
                # static initialisers), before ein could block it: it ended by the signal's
                # default action with nothing started and nothing to lose.
                print(f"{what}: ended by the signal before the run started")
                continue
            if run.returncode != 128 + sig:
                failures.append(f"{what}: exit {run.returncode}, expected {128 + sig}\n"
                                f"{err.decode(errors='replace')[-600:]}")
                continue
            latest = os.path.join(ck, "latest")
            if not os.path.exists(latest):
                failures.append(f"{what}: no checkpoint written")
                continue
            step = int(open(latest).read().strip().split("_")[1].split(".")[0])
            resumed = subprocess.run([a.ein, "train", script, "--checkpoint", ck, "--resume",
                                      "--steps", str(step + 1), "--quiet"],
                                     capture_output=True, env=env, timeout=120)
            if resumed.returncode != 0:
                failures.append(f"{what}: the step-{step} checkpoint did not resume: exit "
                                f"{resumed.returncode}\n{resumed.stderr.decode(errors='replace')}")
            print(f"{what}: exit {run.returncode}, resumed from step {step}")
        # Two signals: the second one ends the run at once.
        run = subprocess.Popen([a.ein, "train", script], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
        time.sleep(1.0)
        run.send_signal(signal.SIGINT)
        run.send_signal(signal.SIGINT)
        start = time.monotonic()
        run.communicate(timeout=60)
        took = time.monotonic() - start
        if run.returncode != 130 or took > 2.0:
            failures.append(f"two SIGINTs: exit {run.returncode} after {took:.2f} s "
                            "(expected 130 at once)")
        else:
            print(f"two SIGINTs: exit 130 after {took:.2f} s")
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"signals: {a.trials + 1 - len(failures)} passed, {len(failures)} failed (seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
