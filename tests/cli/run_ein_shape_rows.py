#!/usr/bin/env python3
"""Runs every row of einops-format case tables through `ein shape`, as a user would.

Usage: run_ein_shape_rows.py EIN_BINARY TSV [TSV...]

Each row (columns op, pattern, input_shapes, kwargs, expected, error_detail, source; '#'
lines are comments) becomes one `ein shape` command. A row passes when ein prints exactly
the `expected` text on stdout and exits 0, or, for an `ERROR` row, exits 1 with a located
diagnostic on stderr (an `error:` line and a caret line under the failing spot). ein's
wording is its own, so the message itself is not compared with einops'.

Rows where ein deliberately differs from einops are listed, with reasons, in
tests/conformance/einops_differences.tsv and applied exactly as the C++ runner
(tests/conformance/einops_conformance_test.cpp) applies them:
  extension  ein's result is ein_expected (and must differ from einops')
  input      extra_args (e.g. `--dtype i64`) are appended; the expectation is einops'
  deferred   (op, `*`, `*`): counted and printed, not run
A listed difference that matches no row of einops_cases.tsv is a failure, so the list
cannot go stale.

The last line is `N passed, M failed` (CI parses it); the exit status is 1 if any failed.
Python 3 standard library only.
"""

import concurrent.futures
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DIFFERENCES = Path(__file__).resolve().parent.parent / "conformance" / "einops_differences.tsv"
CASE_COLUMNS = ("op", "pattern", "input_shapes", "kwargs", "expected")
TIMEOUT_S = 30


@dataclass
class Row:
    file: str
    line: int
    cells: dict
    file_index: int = 0  # position of the file on the command line, for the report order

    def __getitem__(self, column):
        return self.cells[column]


@dataclass
class Difference:
    kind: str
    ein_expected: str
    extra_args: str
    reason: str
    used: bool = False


@dataclass
class Outcome:
    row: Row
    status: str  # "einops" | "extension" | "input" | "deferred" | "failed"
    message: str = ""
    command: list = field(default_factory=list)
    difference: object = None  # the einops_differences.tsv entry that applied, if any


def read_tsv(path):
    """Rows of a TSV: '#' and empty lines are skipped, the first other line names the
    columns. Cells keep their spaces (patterns may end in one); a short row is padded
    with empty cells, like the C++ reader does."""
    header, rows = None, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line or line.startswith("#"):
                continue
            cells = line.split("\t")
            if header is None:
                header = cells
                continue
            cells += [""] * (len(header) - len(cells))
            rows.append(Row(str(path), number, dict(zip(header, cells))))
    return header or [], rows


def read_differences():
    _, rows = read_tsv(DIFFERENCES)
    return {(r["op"], r["pattern"], r["input_shapes"], r["kwargs"]):
            Difference(r["kind"], r["ein_expected"], r["extra_args"], r["reason"]) for r in rows}


def find_difference(differences, row):
    """The difference listed for this row: op, pattern, input_shapes, kwargs ('*' = any)."""
    for (op, pattern, shapes, kwargs), d in differences.items():
        if op == row["op"] and all(want in ("*", got) for want, got in
                                   ((pattern, row["pattern"]), (shapes, row["input_shapes"]), (kwargs, row["kwargs"]))):
            return d
    return None


def einmix_axes(value, size_names):
    """An einmix row's weight or bias axes: quoted with spaces ('c_in c_out'), or bare; the
    einmix (not _init) rows join the names with '_' (c_in_c_out), split here at the sizes'
    names."""
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    if " " in value:
        return value
    out = []
    while value:
        fits = [n for n in size_names if value == n or value.startswith(n + "_")]
        if not fits:
            out.append(value)  # not a size: as written
            break
        name = max(fits, key=len)
        out.append(name)
        value = value[len(name) + 1:]
    return " ".join(out)


def einmix_command(binary, row):
    """`ein shape einmix PATTERN [SHAPE] sizes --weight W [--bias B]` for an einmix row
    (with the input shape: the output shape) or an einmix_init row (without: the plan)."""
    weight, bias, sizes = "", None, []
    for item in row["kwargs"].split(","):
        key, value = item.split("=", 1)
        if key == "weight_shape":
            weight = value
        elif key == "bias_shape":
            bias = None if value == "None" else value
        else:
            sizes.append((key, value))
    names = [k for k, _ in sizes]
    command = [binary, "shape", "einmix", row["pattern"]]
    if row["op"] == "einmix":
        command.append(row["input_shapes"])
    command += [f"{k}={v}" for k, v in sizes] + ["--weight", einmix_axes(weight, names)]
    if bias is not None:
        command += ["--bias", einmix_axes(bias, names)]
    return command


def einops_notation(plan):
    """`ein shape einmix`'s plan line in einops' EinMix notation, as einmix_init rows hold it:
    the einsum with a letter per axis (assigned in sorted name order, '...' kept), shapes as
    Python tuples; fan_in is ein's own and left out."""
    fields = dict(re.findall(r"(\w+)=('[^']*'|\S+)", plan))

    def tuple_(shape):  # ein's (8,16) and (16,) as Python's (8, 16) and (16,)
        if shape == "None":
            return shape
        sizes = [n for n in shape[1:-1].split(",") if n]
        return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"

    einsum = fields["einsum"].strip("'")
    inputs, output = einsum.split(" -> ")
    sides = inputs.split(",") + [output]
    names = sorted({n for side in sides for n in side.split() if n != "..."})
    letter = {n: chr(ord("a") + i) for i, n in enumerate(names)} | {"...": "..."}
    a, w, o = ("".join(letter[n] for n in side.split()) for side in sides)
    return (f"einsum={a},{w}->{o} weight={tuple_(fields['weight'])} bias={tuple_(fields['bias'])} "
            f"pre={fields['pre']} post={fields['post']}")


def build_command(binary, row, extra_args):
    """The `ein shape` command line for one row:
    reduce[sum] -> reduce --reduction sum; reduce[callable f] -> --reduction f;
    X_list -> X --list; kwargs a=1,b=2 -> a=1 b=2; ps=[[..],..] -> --ps '[[..],..]';
    input_shapes (2,3);(4,5) -> two arguments, '-' -> none."""
    op, options = row["op"], []
    if "[" in op:
        op, reduction = op[:op.index("[")], op[op.index("[") + 1:op.rindex("]")]
        if reduction.startswith("callable "):
            reduction = reduction[len("callable "):]
        options += ["--reduction", reduction]
    if op.endswith("_list"):
        op = op[:-len("_list")]
        options.append("--list")
    shapes = row["input_shapes"]
    args = [] if shapes in ("-", "") else shapes.split(";")
    kwargs = row["kwargs"]
    if kwargs.startswith("ps="):
        options += ["--ps", kwargs[len("ps="):]]  # the list itself contains commas
    elif kwargs not in ("-", ""):
        args += kwargs.split(",")
    if extra_args not in ("-", ""):
        options += shlex.split(extra_args)
    if op in ("einmix", "einmix_init"):
        return einmix_command(binary, row)
    # Positionals first, as a user types them: a pattern like '-> a' is a real test of the CLI.
    return [binary, "shape", op, row["pattern"]] + args + options


def has_caret_line(text):
    return any(line.strip().startswith("^") for line in text.splitlines())


def judge(command, expected, notation=lambda out: out):
    """Runs one command; returns "" when it meets `expected`, else what went wrong. `notation`
    turns ein's output into the row's (einmix_init rows are in einops' notation)."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT_S}s"
    except OSError as e:
        return f"could not run: {e}"
    got = f"exit {proc.returncode}, stdout {proc.stdout.strip()!r}"
    stderr = "".join(f"\n    | {line}" for line in proc.stderr.rstrip("\n").splitlines())
    if expected == "ERROR":
        problems = []
        if proc.returncode != 1:
            problems.append("exit status is not 1")
        if "error:" not in proc.stderr:
            problems.append("no 'error:' on stderr")
        if not has_caret_line(proc.stderr):
            problems.append("no caret line on stderr")
        if not problems:
            return ""
        return f"expected: ERROR (exit 1, located diagnostic)\n  got:      {got} ({'; '.join(problems)})\n  stderr:{stderr}"
    if proc.returncode == 0 and notation(proc.stdout.strip()) == expected:
        return ""
    return f"expected: {expected}\n  got:      {got}\n  stderr:{stderr}"


def run_row(binary, row, diff):
    outcome = judge_row(binary, row, diff)
    outcome.difference = diff
    return outcome


def judge_row(binary, row, diff):
    if diff is not None and diff.kind == "deferred":
        return Outcome(row, "deferred")
    expected = row["expected"]
    extra_args = diff.extra_args if diff is not None else "-"
    command = build_command(binary, row, extra_args)
    if diff is not None and diff.kind in ("extension", "einops_bug"):
        if diff.ein_expected == expected:
            return Outcome(row, "failed", f"listed as {diff.kind} in einops_differences.tsv, but einops agrees", command)
        expected = diff.ein_expected
    message = judge(command, expected, einops_notation if row["op"] == "einmix_init" else str)
    if message:
        return Outcome(row, "failed", message, command)
    return Outcome(row, diff.kind if diff is not None else "einops", "", command)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary, paths = argv[1], argv[2:]
    differences = read_differences()
    jobs, setup_failures = [], []
    for index, path in enumerate(paths):
        header, rows = read_tsv(path)
        missing = [c for c in CASE_COLUMNS if c not in header]
        if missing or not rows:
            # A reader or file problem must not pass quietly as "0 failed".
            setup_failures.append(f"{path}: no rows, or columns missing: {', '.join(missing) or '-'}")
            continue
        for row in rows:
            row.file_index = index
            diff = find_difference(differences, row)
            if diff is not None:
                diff.used = True
            jobs.append((row, diff))

    workers = min(8, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(lambda job: run_row(binary, *job), jobs))
    outcomes.sort(key=lambda o: (o.row.file_index, o.row.line))  # pool.map keeps order; be explicit

    counts = {k: 0 for k in ("einops", "extension", "einops_bug", "input", "deferred", "failed")}
    for o in outcomes:
        counts[o.status] += 1
        if o.status == "failed":
            r = o.row
            print(f"{r.file}:{r.line}: FAIL {r['op']} {r['pattern']!r} {r['input_shapes']} {r['kwargs']}")
            if o.command:
                print(f"  command:  {shlex.join(o.command)}")
            print(f"  {o.message}")
    for message in setup_failures:
        print(f"FAIL {message}")
    for key, d in sorted(differences.items()):
        if d.kind == "deferred" and d.used:
            n = sum(o.difference is d for o in outcomes)
            print(f"deferred: {n} rows ({' '.join(key)}): {d.reason}")
    if {"einops_cases.tsv", "held_back_cases.tsv"} <= {Path(p).name for p in paths}:
        for key, d in sorted(differences.items()):
            if not d.used:
                setup_failures.append(key)
                print(f"{DIFFERENCES.name}: FAIL {d.kind} difference matches no row: {' | '.join(key)}")

    failed = counts["failed"] + len(setup_failures)
    passed = counts["einops"] + counts["extension"] + counts["einops_bug"] + counts["input"]
    print(f"{len(outcomes)} rows: {counts['einops']} as einops, {counts['extension']} extensions, "
          f"{counts['einops_bug']} einops bugs, "
          f"{counts['input']} with supplied inputs, {counts['deferred']} deferred, {counts['failed']} failed")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
