#!/usr/bin/env python3
"""What `ein shape` does beyond the case tables: help, --explain, exit codes, the exact text
of representative diagnostics (the caret column included), and robustness against long or
odd input.

Usage: test_ein_shape_cli.py EIN_BINARY

The tables (run_ein_shape_rows.py) check results and that errors are located; this file pins
the wording and the caret of one diagnostic per kind of mistake, so a change to a message is
a deliberate change to this file. Standard library only. The last line is
`N passed, M failed`; the exit status is 1 if any failed.
"""

import random
import shlex
import subprocess
import sys
import unittest
from dataclasses import dataclass

EIN = None  # set from argv in main()

# Text that means a C++ exception or a crash leaked to the user.
LEAKS = ("std::", "what()", "terminate", "Aborted", "Segmentation fault", "core dumped", "basic_string")


@dataclass
class Run:
    args: list
    rc: int
    out: str
    err: str


def ein(*args, timeout=30):
    proc = subprocess.run([EIN, *args], capture_output=True, timeout=timeout)
    decode = lambda b: b.decode("utf-8", errors="replace")
    return Run(list(args), proc.returncode, decode(proc.stdout), decode(proc.stderr))


def caret_lines(text):
    return [line for line in text.splitlines() if line.strip().startswith("^")]


class Base(unittest.TestCase):
    maxDiff = None

    def assertClean(self, r):
        """No crash, no signal, no C++ exception text, whatever the input."""
        self.assertIn(r.rc, (0, 1, 2), f"{r.args}: exit {r.rc}\n{r.err}")
        for leak in LEAKS:
            self.assertNotIn(leak, r.out + r.err, f"{r.args}: C++ internals leaked")

    def assertOk(self, r, stdout):
        self.assertClean(r)
        self.assertEqual((r.rc, r.out, r.err), (0, stdout + "\n", ""), r.args)

    def assertDiagnostic(self, r):
        """Exit 1, nothing on stdout, an error on stderr."""
        self.assertClean(r)
        self.assertEqual(r.rc, 1, f"{r.args}\n{r.err}")
        self.assertEqual(r.out, "", f"{r.args}: stdout must stay empty on error")
        self.assertIn("error:", r.err, r.args)

    def assertLocated(self, r):
        self.assertDiagnostic(r)
        self.assertTrue(caret_lines(r.err), f"{r.args}: no caret line in\n{r.err}")


class Help(Base):
    def test_shape_help_shows_usage_and_examples(self):
        r = ein("shape", "--help")
        self.assertClean(r)
        self.assertEqual(r.rc, 0)
        self.assertIn("Examples:", r.out)
        self.assertIn("ein shape rearrange 'b s (h d) -> b h s d' '(2,5,12)' h=3", r.out)
        for op in ("rearrange", "reduce", "repeat", "einsum", "pack", "unpack", "parse_shape"):
            self.assertIn(f"ein shape {op} ", r.out, op)
        for option in ("--reduction", "--ddof", "--ps", "--dtype", "--list", "--explain"):
            self.assertIn(option, r.out, option)

    def test_top_level_help_lists_shape(self):
        r = ein("--help")
        self.assertClean(r)
        self.assertEqual(r.rc, 0)
        self.assertIn("shape", r.out)

    def test_every_help_example_runs(self):
        """The examples in --help are commands users paste: each must run and print what its
        comment says ('# error ...' examples must fail with a located diagnostic)."""
        examples = [line.strip() for line in ein("shape", "--help").out.splitlines()
                    if line.strip().startswith("ein shape ")]
        self.assertGreaterEqual(len(examples), 8)
        for example in examples:
            command, _, comment = example.partition("  #")
            comment = comment.strip()
            with self.subTest(example=example):
                r = ein(*shlex.split(command)[1:])
                if comment.startswith("error"):
                    self.assertLocated(r)
                elif comment:
                    self.assertOk(r, comment)
                else:
                    self.assertClean(r)
                    self.assertEqual(r.rc, 0, r.err)


class Output(Base):
    def test_result_formats(self):
        cases = [
            (["rearrange", "a b -> (a b)", "(2,3)"], "(6,)"),
            (["reduce", "a b -> ", "(2,3)", "--reduction", "sum"], "()"),
            (["rearrange", "a b c -> c a b", "(2,3,4)"], "(4,2,3)"),
            (["pack", "* h w", "(3,4,5)", "(4,5)"], "(4,4,5) ps=[(3,);()]"),
            (["unpack", "*", "(5,)", "--ps", "[[2],[1],[2]]"], "[(2,);(1,);(2,)]"),
            (["parse_shape", "a _ ... b", "(2,3,4,5)"], "{a:2,b:5}"),
            (["parse_expression", "a (b c) ... 1"], "OK composition=[(a) (b c) ... ()]"),
            (["reduce", "a b -> a", "(2,3)", "--reduction", "std", "--ddof", "1"], "(2,)"),
            (["reduce", "a b -> a", "(2,3)", "--reduction", "logsumexp"], "(2,)"),
        ]
        for args, expected in cases:
            with self.subTest(args=args):
                self.assertOk(ein("shape", *args), expected)

    def test_pattern_starting_with_arrow_is_a_pattern_not_an_option(self):
        self.assertOk(ein("shape", "repeat", "-> a", "()", "a=3"), "(3,)")
        self.assertOk(ein("shape", "rearrange", "-> ", "()"), "()")


class EinMix(Base):
    """`ein shape einmix`: einops' EinMix layer, its output shape or, without an input, its plan."""

    def test_output_shape_and_plan(self):
        self.assertOk(ein("shape", "einmix", "b t (h c) -> b t (h d)", "(2,5,12)",
                          "h=3", "c=4", "d=8", "--weight", "h c d"), "(2,5,24)")
        self.assertOk(ein("shape", "einmix", "b (g c_in) -> b (g c_out)",
                          "g=2", "c_in=8", "c_out=4",
                          "--weight", "g c_in c_out", "--bias", "g c_out"),
                      "weight=(2,8,4) bias=(1,2,4) fan_in=8 "
                      "einsum='b g c_in, g c_in c_out -> b g c_out' "
                      "pre='b (g c_in) -> b g c_in' post='b g c_out -> b (g c_out)'")
        self.assertOk(ein("shape", "einmix", "b c -> c b", "(2,3)", "--weight", ""), "(3,2)")

    def test_errors_point_into_the_text_at_fault(self):
        io = ["b c_in -> b c_out", "c_in=8", "c_out=4", "--weight", "c_in c_out"]
        r = ein("shape", "einmix", *io[:2], *io[3:])
        self.assertLocated(r)
        self.assertTrue(
            r.err.startswith("weight_shape:1:6: error: the size of weight axis 'c_out'"), r.err)
        self.assertEqual(caret_lines(r.err)[0], "      ^~~~~")
        r = ein("shape", "einmix", *io, "--bias", "c_in")
        self.assertLocated(r)
        self.assertTrue(r.err.startswith("bias_shape:1:1: error: bias axis 'c_in'"), r.err)
        r = ein("shape", "einmix", io[0], "(2,7)", *io[1:])
        self.assertLocated(r)
        self.assertTrue(r.err.startswith("pattern:1:3: error:"), r.err)

    def test_options_belong_to_their_op(self):
        r = ein("shape", "einmix", "b c_in -> b c_out", "c_in=8", "c_out=4")
        self.assertClean(r)
        self.assertEqual(r.rc, 2, r.err)
        self.assertIn("--weight", r.err)
        self.assertDiagnostic(ein("shape", "rearrange", "a b -> b a", "(2,3)", "--weight", "a"))
        self.assertDiagnostic(ein("shape", "einmix", "b c -> b d", "(2,3)", "(2,3)", "c=3", "d=2",
                                  "--weight", "c d"))
        self.assertDiagnostic(ein("shape", "einmix", "b c -> b d", "c=3", "d=2", "--weight", "c d",
                                  "--reduction", "sum"))


class Explain(Base):
    def test_rearrange_shows_split_and_permute(self):
        r = ein("shape", "rearrange", "b (h w) c -> b w h c", "(2,12,3)", "h=3", "--explain")
        self.assertClean(r)
        self.assertEqual(r.rc, 0, r.err)
        lines = r.out.splitlines()
        for line in ("op: rearrange", "elementary axes: b=2 h=3 w=4 c=3", "split: b (h w) c -> (2,3,4,3)",
                     "permute: [0,2,1,3]", "output: b w h c", "result: (2,4,3,3)"):
            self.assertIn(line, lines)

    def test_reduce_repeat_einsum_show_their_step(self):
        cases = [
            (["reduce", "b c (h h2) (w w2) -> b c h w", "(10,20,30,40)", "h2=2", "w2=2", "--reduction", "max"],
             ["op: reduce (max)", "split: b c (h h2) (w w2) -> (10,20,15,2,20,2)", "reduce: h2=2 w2=2",
              "result: (10,20,15,20)"]),
            (["repeat", "h w -> h w c", "(30,40)", "c=3"], ["op: repeat", "add: c=3", "result: (30,40,3)"]),
            (["einsum", "b s d, d f -> b s f", "(2,5,12)", "(12,7)"], ["sum over: d=12", "result: (2,5,7)"]),
        ]
        for args, expected in cases:
            with self.subTest(args=args):
                r = ein("shape", *args, "--explain")
                self.assertEqual(r.rc, 0, r.err)
                for line in expected:
                    self.assertIn(line, r.out.splitlines())

    def test_explain_of_a_failing_pattern_is_the_diagnostic(self):
        self.assertLocated(ein("shape", "rearrange", "b (h w) c -> b h w c", "(2,12,3)", "h=5", "--explain"))


class ExitCodes(Base):
    def test_zero_on_success(self):
        self.assertEqual(ein("shape", "rearrange", "a b -> b a", "(2,3)").rc, 0)

    def test_one_on_a_pattern_error(self):
        self.assertEqual(ein("shape", "rearrange", "a b -> b a c", "(2,3)").rc, 1)

    def test_two_on_usage_errors(self):
        for args in (["shape"], ["shape", "rearrange"], ["shape", "rearrange", "a -> a", "(2,)", "--bogus"],
                     ["shape", "reduce", "a -> ", "(2,)", "--ddof", "x"], ["no-such-subcommand"],
                     ["shape", "no_such_op", "a -> a", "(2,)"]):
            with self.subTest(args=args):
                r = ein(*args)
                self.assertClean(r)
                self.assertEqual(r.rc, 2, f"{args}: a usage error\n{r.err}")
                self.assertEqual(r.out, "")
                self.assertNotEqual(r.err, "")


# One diagnostic per kind of mistake, with its full text. The caret line fixes the column.
DIAGNOSTICS = {
    "non_divisible_split": (
        ["rearrange", "b (h w) c -> b h w c", "(2,12,3)", "h=5"],
        "pattern:1:3: error: cannot split an axis of length 12 into (h w) with h=5: 12 is not divisible by 5\n"
        " b (h w) c -> b h w c\n"
        "   ^~~~~\n"
        "note: input shape: (2,12,3)\n"
        "note: sizes bound so far: h=5 (given), b=2, c=3\n"),
    "rank_mismatch": (
        ["rearrange", "b c h w -> b (c h w)", "(10,20,30)"],
        "pattern:1:1: error: the pattern expects 4 dimensions, but the input has 3 (shape (10,20,30))\n"
        " b c h w -> b (c h w)\n"
        " ^~~~~~~\n"
        "note: input shape: (10,20,30)\n"),
    "unknown_identifier_on_the_right": (
        ["rearrange", "b h w -> b h w c", "(2,3,4)"],
        "pattern:1:16: error: 'c' appears only on the right side: rearrange cannot create axes (repeat does)\n"
        " b h w -> b h w c\n"
        "                ^\n"),
    "nested_parentheses": (
        ["rearrange", "a ((b c)) -> a b c", "(2,6)"],
        "pattern:1:4: error: axis composition is one level: parentheses cannot nest\n"
        " a ((b c)) -> a b c\n"
        "    ^\n"),
    "unbalanced_open_parenthesis": (
        ["rearrange", "b (h w c -> b h w c", "(2,12,3)"],
        "pattern:1:3: error: unbalanced parentheses: this '(' is never closed\n"
        " b (h w c -> b h w c\n"
        "   ^\n"),
    "glued_ellipsis": (
        ["rearrange", "pre... -> pre", "(2,3)"],
        "pattern:1:1: error: 'pre...' is not an axis: names, numbers and '...' are separated by spaces, "
        "and a name starts with a letter\n"
        " pre... -> pre\n"
        " ^~~~~~\n"),
    "einsum_size_mismatch_between_operands": (
        ["einsum", "b s d, d f -> b s f", "(2,5,12)", "(10,7)"],
        "pattern:1:8: error: axis 'd' has length 10 here, but length 12 where it first appears\n"
        " b s d, d f -> b s f\n"
        "        ^\n"
        "pattern:1:5: note: 'd' first appears here, with length 12\n"
        " b s d, d f -> b s f\n"
        "     ^\n"
        "note: input shapes: (2,5,12), (10,7)\n"
        "note: sizes bound so far: b=2, s=5, d=12\n"),
    "unpack_with_two_inferred_sizes": (
        ["unpack", "i *", "(3,10)", "--ps", "[[-1],[2],[-1]]"],
        "pattern:1:3: error: the packed shapes [[-1],[2],[-1]] hold more than one -1: only one size can be inferred\n"
        " i *\n"
        "   ^\n"
        "note: input shape: (3,10)\n"
        "note: sizes bound so far: i=3\n"),
    "bad_shape_argument": (
        ["rearrange", "a b -> b a", "(2,x)"],
        "argument 3:1:4: error: expected a non-negative integer\n"
        " (2,x)\n"
        "    ^\n"),
    "bad_size_argument": (
        ["rearrange", "a b -> b a", "(2,3)", "h=x"],
        "argument 4:1:3: error: expected a non-negative integer\n"
        " h=x\n"
        "   ^\n"),
    "size_argument_in_exponent_notation": (
        ["rearrange", "b (h w) -> b h w", "(2,12)", "h=1e30"],
        "argument 4:1:4: error: unexpected text after the size: a size is a whole number written "
        "in digits (12, not 1.2e1)\n"
        " h=1e30\n"
        "    ^\n"),
    "size_argument_beyond_int64": (
        ["rearrange", "b (h w) -> b h w", "(2,12)", "h=99999999999999999999"],
        "argument 4:1:3: error: the size 99999999999999999999 is too large: a size is at most "
        "2^63 - 1 (9223372036854775807)\n"
        " h=99999999999999999999\n"
        "   ^~~~~~~~~~~~~~~~~~~~\n"),
    "shape_argument_beyond_int64": (
        ["rearrange", "b (h w) -> b h w", "(2,9223372036854775808)", "h=2"],
        "argument 3:1:4: error: the size 9223372036854775808 is too large: a size is at most "
        "2^63 - 1 (9223372036854775807)\n"
        " (2,9223372036854775808)\n"
        "    ^~~~~~~~~~~~~~~~~~~\n"),
    "sizes_multiply_beyond_int64": (
        ["rearrange", "b h w -> b (h w)", "(4611686018427387904,4,2)"],
        "pattern:1:10: error: the sizes multiply beyond the largest tensor size (2^63 - 1 elements)\n"
        " b h w -> b (h w)\n"
        "          ^~~~~~~\n"
        "note: input shape: (4611686018427387904,4,2)\n"
        "note: sizes bound so far: b=4611686018427387904, h=4, w=2\n"),
    "repeat_new_axis_without_size": (
        ["repeat", "h w -> h w c", "(3,4)"],
        "pattern:1:12: error: new axis 'c' needs a size: give it as c=N\n"
        " h w -> h w c\n"
        "            ^\n"
        "note: input shape: (3,4)\n"
        "note: sizes bound so far: h=3, w=4\n"),
    "einsum_operand_count": (
        ["einsum", "i j, j k -> i k", "(2,3)"],
        "pattern:1:6: error: einsum pattern has 2 input sides, but 1 tensor was given\n"
        " i j, j k -> i k\n"
        "      ^~~\n"),
    "bad_ps_argument": (
        ["unpack", "i j * k", "(2,3,8,5)", "--ps", "[[7"],
        "--ps:1:4: error: expected ',' or ']'\n"
        " [[7\n"
        "    ^\n"),
}


class Diagnostics(Base):
    """Filled in below: one test per DIAGNOSTICS entry, so each counts on its own."""

    def test_unknown_reduction_names_the_choices_and_is_located(self):
        r = ein("shape", "reduce", "a b -> a", "(2,3)", "--reduction", "median")
        self.assertIn("error: unknown reduction 'median'; expected one of min, max, sum, mean, prod, any, all, "
                      "logsumexp, var, std", r.err)
        self.assertLocated(r)  # like every other argument error, it points at what was typed

    def test_var_without_ddof_asks_for_it(self):
        r = ein("shape", "reduce", "b t d -> b d", "(2,5,8)", "--reduction", "var")
        self.assertDiagnostic(r)
        self.assertIn("error: var needs an explicit ddof (numpy's default is 0, torch's is 1): "
                      "write var(ddof=1) or pass --ddof", r.err)

    def test_no_stdout_on_any_error(self):
        for args in (["parse_expression", "pre..."], ["parse_expression", "(a b"], ["rearrange", "a -> b", "(2,)"],
                     ["pack", "a b", "(2,3)"], ["parse_shape", "a b", "(2,)"], ["einsum", "i -> j", "(2,)"]):
            with self.subTest(args=args):
                self.assertDiagnostic(ein("shape", *args))


def _diagnostic_test(args, expected):
    def test(self):
        r = ein("shape", *args)
        self.assertDiagnostic(r)
        self.assertEqual(r.err, expected, f"ein shape {args}")
    return test


for _name, (_args, _expected) in DIAGNOSTICS.items():
    setattr(Diagnostics, f"test_{_name}", _diagnostic_test(_args, _expected))


class Robustness(Base):
    def test_unicode_ellipsis_is_an_ellipsis(self):
        self.assertOk(ein("shape", "rearrange", "a … b -> b … a", "(2,3,4,5)"), "(5,3,4,2)")
        self.assertOk(ein("shape", "parse_expression", "a … b"), "OK composition=[(a) ... (b)]")

    def test_glued_unicode_ellipsis_is_rejected_like_the_ascii_one(self):
        self.assertLocated(ein("shape", "parse_expression", "pre…"))

    def test_caret_counts_characters_not_bytes(self):
        # The caret goes under the character that failed, as the terminal shows it: '…' is one column.
        r = ein("shape", "rearrange", "a … b -> b … a ä", "(2,3,4,5)")
        self.assertLocated(r)
        self.assertIn(" a … b -> b … a ä\n" + " " * 16 + "^\n", r.err)
        r = ein("shape", "rearrange", "a b -> b ä", "(2,3)")
        self.assertLocated(r)
        self.assertIn(" a b -> b ä\n" + " " * 10 + "^\n", r.err)

    def test_non_ascii_and_control_characters_are_clean_errors(self):
        for pattern in ("a b -> b ä", "ä b -> b ä", "a b → b a", "a b -> b a\n", "a b\n-> b a", "a \x01 b -> b a",
                        "a b -> b\u200ba", "a\u00a0b -> b a", "日本 -> 日本", "a b -> b a\x7f"):
            with self.subTest(pattern=pattern):
                self.assertLocated(ein("shape", "rearrange", pattern, "(2,3)"))
        self.assertDiagnostic(ein("shape", "rearrange", "a b -> b a", "(2,3)", "ä=3"))
        self.assertDiagnostic(ein("shape", "rearrange", "a b -> b a", "(２,3)"))

    def test_invalid_utf8_is_a_clean_error(self):
        proc = subprocess.run([EIN.encode(), b"shape", b"rearrange", b"a \xff b -> b a", b"(2,3)"], capture_output=True)
        r = Run(["invalid utf-8"], proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))
        self.assertLocated(r)

    def test_very_long_patterns(self):
        n = 6000
        names = [f"a{i}" for i in range(n)]
        r = ein("shape", "rearrange", " ".join(names) + " -> " + " ".join(reversed(names)), "(" + ",".join(["1"] * n) + ")")
        self.assertOk(r, "(" + ",".join(["1"] * n) + ")")
        for pattern in ("(" * 50000 + "a" + ")" * 50000 + " -> a", "a" * 100000 + " -> a", "... " * 10000 + "-> a",
                        "-> " * 10000, "a -> " + "a " * 30000, "(" * 100000):
            with self.subTest(pattern=pattern[:20] + "…"):
                self.assertLocated(ein("shape", "rearrange", pattern, "(1,)"))
        r = ein("shape", "einsum", ", ".join(["i"] * 2000) + " -> i", *["(3,)"] * 2000)
        self.assertOk(r, "(3,)")

    def test_sizes_that_overflow_are_errors_not_wrong_shapes(self):
        for args in (["rearrange", "a b -> (a b)", "(9223372036854775807,3)"],
                     ["rearrange", "a b c -> (a b c)", "(4294967296,4294967296,4294967296)"],
                     ["repeat", "a -> (a b)", "(4294967296,)", "b=4294967296"],
                     ["rearrange", "a b -> b a", "(99999999999999999999,3)"]):
            with self.subTest(args=args):
                self.assertDiagnostic(ein("shape", *args))

    def test_random_garbage_never_crashes(self):
        rng = random.Random(1234)  # fixed seed: a failure reproduces
        alphabet = list("ab c(d)e ... -> , 1 2 0 _ * … ä\t") + ["->", "(", ")", "...", " "]
        ops = ["rearrange", "reduce", "repeat", "einsum", "pack", "unpack", "parse_shape", "parse_expression"]
        shapes = ["(2,3)", "()", "(0,)", "(1,1,1)", "(2,3,4)", "(6,)", "(2,x)", "(", "(1,,2)", "(-1,)"]
        problems = []
        for _ in range(300):
            op = rng.choice(ops)
            pattern = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
            args = ["shape", op, pattern, *rng.sample(shapes, rng.randint(0, 3))]
            if op == "reduce":
                args += ["--reduction", rng.choice(["sum", "max", "var", "std(ddof=1)", "nope", "var(ddof=", ""])]
            if op == "unpack":
                args += ["--ps", rng.choice(["[[2],[-1]]", "[(),(7,)]", "[[", "[]", "[[-1],[-1]]", "x"])]
            if rng.random() < 0.3:
                args.append(rng.choice(["a=2", "b=0", "c=-1", "=3", "a=", "a=99999999999999999999"]))
            r = ein(*args)
            if r.rc not in (0, 1, 2) or any(leak in r.out + r.err for leak in LEAKS):
                problems.append(f"crash or leak: exit {r.rc}: {args!r}\n{r.err}")
            elif r.rc != 0 and r.out:
                problems.append(f"stdout {r.out!r} on error: {args!r}")
        # One failure listing the first few, not 300 subtests.
        self.assertEqual(problems[:8], [], f"{len(problems)} of 300 random commands misbehaved")


def main():
    global EIN
    if len(sys.argv) != 2:
        print("usage: test_ein_shape_cli.py EIN_BINARY", file=sys.stderr)
        return 2
    EIN = sys.argv[1]
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    # A test fails once however many of its subTests fail.
    failed = len({getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors})
    failed += len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
