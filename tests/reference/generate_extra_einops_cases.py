#!/usr/bin/env python3
"""Writes tests/cli/held_back_cases.tsv: extra einops cases whose expected results come from
the real einops, run on numpy zeros.

Usage: python3 tests/reference/generate_extra_einops_cases.py [-o OUTPUT]

The cases are like those of tests/conformance/data/einops_cases.tsv in kind (splits, merges,
ellipses, units, anonymous axes, zero-size axes, list inputs, every reduction, repeat,
einsum, pack/unpack, parse_shape, parse_expression, and many errors) but none is a copy of
one of its rows, so ein cannot have been tuned to them. The table is written in the same
columns and conventions and read by tests/cli/run_ein_shape_rows.py.

Developers run this script; CI only reads its output, so einops and numpy are needed here
only. It deliberately leaves out what ein does on purpose beyond einops (compositions or
anonymous axes in einsum; logsumexp/var/std) and cases where einops fails for a backend
reason that has nothing to do with the pattern. Error messages print Python sets, so the
script re-runs itself with PYTHONHASHSEED=0 to make their order reproducible.
"""

import argparse
import ast
import os
import platform
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
DEFAULT_OUTPUT = TESTS / "cli" / "held_back_cases.tsv"
EXISTING = TESTS / "conformance" / "data" / "einops_cases.tsv"

# (op, pattern, input_shapes, kwargs, note). Formats as in einops_cases.tsv: shapes are
# ';'-separated tuples or '-', kwargs 'a=1,b=2' or 'ps=[[..],..]' or '-'.
# Keep each group's valid cases first, then its errors.
CASES = [
    # --- rearrange: permutations, splits, merges ---
    ("rearrange", "b h w c -> b c h w", "(4,5,6,3)", "-", "NHWC to NCHW"),
    ("rearrange", "b (h p1) (w p2) c -> b (h w) (p1 p2 c)", "(2,8,12,3)", "p1=4,p2=4", "ViT patchify"),
    ("rearrange", "b (h w) c -> b h w c", "(3,20,5)", "w=4", "split, infer the first factor"),
    ("rearrange", "(b t) d -> b t d", "(30,8)", "t=5", "split the leading axis"),
    ("rearrange", "b t (h d) -> (b h) t d", "(2,7,24)", "h=6", "heads into batch"),
    ("rearrange", "b c (h1 h2 h3) -> b c h1 h2 h3", "(2,3,24)", "h1=2,h2=3", "three-way split, infer the last"),
    ("rearrange", "b (c1 c2 c3) -> b c3 c2 c1", "(2,30)", "c1=2,c3=5", "three-way split, infer the middle"),
    ("rearrange", "(a b) (c d) -> (a c) (b d)", "(6,20)", "a=2,c=4", "split two axes and regroup"),
    ("rearrange", "image_batch height width -> width height image_batch", "(2,3,4)", "-", "long names"),
    ("rearrange", "A B -> B A", "(3,4)", "-", "upper-case names"),
    ("rearrange", "a_1 b__2 -> b__2 a_1", "(3,4)", "-", "inner underscores are allowed"),
    ("rearrange", "a b c d -> d (c b) a", "(1,2,3,4)", "-", "merge in reverse order"),
    ("rearrange", "a b c -> (c) (b) (a)", "(2,3,4)", "-", "single-axis groups"),
    # --- rearrange: ellipsis in every position ---
    ("rearrange", "... h w -> ... (h w)", "(2,3,4,5)", "-", "ellipsis first"),
    ("rearrange", "... -> (...)", "(3,4,5)", "-", "flatten everything"),
    ("rearrange", "... a -> a ...", "(2,3,4)", "-", "last axis to the front"),
    ("rearrange", "a ... -> ... a", "(2,3,4)", "-", "first axis to the back"),
    ("rearrange", "a ... b -> b ... a", "(2,3,4,5)", "-", "ellipsis in the middle"),
    ("rearrange", "a ... b -> b ... a", "(2,5)", "-", "ellipsis matching no axes"),
    ("rearrange", "a b ... -> (b a) (...)", "(2,3,4,5)", "-", "merged ellipsis on the right"),
    ("rearrange", "a b ... -> (...) b a", "(2,3)", "-", "empty ellipsis merged is a unit axis"),
    ("rearrange", "a ... -> (a ...)", "(2,3,4)", "-", "ellipsis merged after a name"),
    ("rearrange", "a ... -> (... a)", "(2,3,4)", "-", "ellipsis merged before a name"),
    ("rearrange", "... (h w) -> ... h w", "(2,3,12)", "w=6", "split after an ellipsis"),
    ("rearrange", "(h w) ... -> h w ...", "(12,3)", "h=4", "split before an ellipsis"),
    # --- rearrange: units ---
    ("rearrange", "a 1 b -> a b", "(3,1,4)", "-", "squeeze a middle unit"),
    ("rearrange", "a b -> a 1 b 1", "(3,4)", "-", "insert units"),
    ("rearrange", "a b -> a () b", "(3,4)", "-", "insert a unit with ()"),
    ("rearrange", "a () b -> (a b)", "(3,1,4)", "-", "squeeze with ()"),
    ("rearrange", "(a 1) (b 1) -> 1 a b", "(3,4)", "-", "1 inside parentheses is ignored"),
    ("rearrange", "a b -> (a 1 b)", "(3,4)", "-", "1 inside a merge"),
    ("rearrange", "() -> ", "(1,)", "-", "squeeze to a scalar"),
    ("rearrange", " -> 1 1", "()", "-", "scalar to (1,1)"),
    # --- rearrange: zero-size axes ---
    ("rearrange", "a b -> b a", "(0,0)", "-", "all zero"),
    ("rearrange", "a b c -> (a b) c", "(0,3,4)", "-", "merge with a zero"),
    ("rearrange", "(a b) c -> a b c", "(0,5)", "b=3", "split a zero-length axis"),
    ("rearrange", "a (b c) -> a b c", "(2,0)", "b=3", "split zero, infer zero"),
    # --- rearrange: list inputs ---
    ("rearrange_list", "b h w -> h (b w)", "(4,5);(4,5);(4,5)", "-", "concatenate along w"),
    ("rearrange_list", "b ... -> ... b", "(3,4);(3,4)", "-", "stack last"),
    ("rearrange_list", "b -> b", "();();();()", "-", "stack scalars"),
    ("rearrange_list", "(b1 b2) h -> b1 b2 h", "(5,);(5,);(5,);(5,);(5,);(5,)", "b1=2", "split the stacked axis"),
    ("rearrange_list", "b h w -> (b h) w", "(3,4)", "-", "list of one"),
    # --- rearrange: errors ---
    ("rearrange", "a b c -> a b c", "(2,3,4,5)", "-", "rank too large"),
    ("rearrange", "... a b -> a b ...", "(5,)", "-", "too few axes for the named part"),
    ("rearrange", "... c -> c (...)", "()", "-", "scalar into an ellipsis pattern"),
    ("rearrange", "a ... -> a", "(2,3,4)", "-", "ellipsis dropped on the right"),
    ("rearrange", "a b -> b (a ...)", "(2,3)", "-", "ellipsis only on the right, in a group"),
    ("rearrange", "(a ...) b -> a b ...", "(6,4)", "-", "ellipsis in parentheses on the left"),
    ("rearrange", "... a ... -> a", "(2,3,4)", "-", "two ellipses"),
    ("rearrange", "a b -> a b ....", "(2,3)", "-", "four dots"),
    ("rearrange", "a b -> a.b", "(2,3)", "-", "a single dot"),
    ("rearrange", "a (b c) -> a b c", "(2,12)", "-", "two unknowns in one group"),
    ("rearrange", "a (b c) -> a b c", "(2,12)", "b=5", "not divisible"),
    ("rearrange", "a (b c) -> a b c", "(2,12)", "b=3,c=5", "over-specified, inconsistent"),
    ("rearrange", "a (b c) -> a b c", "(2,0)", "b=0", "cannot infer from 0/0"),
    ("rearrange", "a b -> b a", "(2,3)", "b=4", "given size disagrees with the input"),
    ("rearrange", "a b -> b a", "(2,3)", "c=4", "size for an axis not in the pattern"),
    ("rearrange", "a b c -> a c d", "(2,3,4)", "-", "left-only and right-only names"),
    ("rearrange", "a b -> a b b", "(2,3)", "-", "duplicate on the right"),
    ("rearrange", "a a -> a", "(3,3)", "-", "duplicate on the left"),
    ("rearrange", "a (b b) -> a b", "(2,9)", "-", "duplicate inside a group"),
    ("rearrange", "(a (b c)) -> a b c", "(24,)", "-", "nested parentheses"),
    ("rearrange", "a (b c -> a b c", "(2,12)", "-", "unclosed parenthesis on the left"),
    ("rearrange", "a b) -> a b", "(2,3)", "-", "unopened parenthesis"),
    ("rearrange", "a b -> (a b", "(2,3)", "-", "unclosed parenthesis on the right"),
    ("rearrange", "a 2b -> 2b a", "(2,3)", "-", "name starting with a digit"),
    ("rearrange", "a b_ -> b_ a", "(2,3)", "-", "name ending with an underscore"),
    ("rearrange", "a@ b -> b a@", "(2,3)", "-", "unknown character"),
    ("rearrange", "a b -> a, b", "(2,3)", "-", "a comma in rearrange"),
    ("rearrange", "a b 3 -> a b", "(2,3,3)", "-", "non-unitary anonymous axis on the left"),
    ("rearrange", "a (b 2) -> a b", "(2,6)", "-", "anonymous axis in a group"),
    ("rearrange", "a 0 -> a", "(2,0)", "-", "anonymous axis of length 0"),
    ("rearrange", "a b => b a", "(2,3)", "-", "no arrow"),
    ("rearrange", "a b -> b a -> a", "(2,3)", "-", "two arrows"),
    ("rearrange", "-> ", "(2,)", "-", "empty pattern, 1-d input"),
    ("rearrange_list", "b h -> h b", "(2,3);(2,3)", "-", "list stacking adds an axis the pattern lacks"),
    ("rearrange_list", "b h w -> b h w", "(2,3);(2,3,4)", "-", "list of different ranks"),
    # --- reduce ---
    ("reduce[min]", "b c h w -> b c", "(2,3,4,5)", "-", "global min pool"),
    ("reduce[min]", "(a b) c -> a c", "(6,4)", "a=2", "reduce a split factor"),
    ("reduce[min]", "... a b -> ... b", "(2,3,4,5)", "-", "ellipsis kept"),
    ("reduce[max]", "b (h 2) (w 2) c -> b h w c", "(2,8,6,3)", "-", "max pool with anonymous axes"),
    ("reduce[max]", "a b c -> c () a", "(2,3,4)", "-", "reduce and insert a unit"),
    ("reduce[max]", "b c (h h2) (w w2) -> b c h w", "(2,3,8,10)", "h=2,w=5", "adaptive pool, infer the window"),
    ("reduce[sum]", "... c -> c", "(2,3,4)", "-", "sum over the ellipsis"),
    ("reduce[sum]", "(a b) -> b", "(12,)", "b=4", "split then reduce"),
    ("reduce[sum]", "a 1 b -> a b", "(2,1,3)", "-", "a unit on the left"),
    ("reduce[sum]", "a b -> (b a) 1 1", "(2,3)", "-", "merge and add units"),
    ("reduce[sum]", "(a 3) b -> a", "(6,4)", "-", "anonymous factor reduced"),
    ("reduce[sum]", "a b -> a", "(0,3)", "-", "zero-size kept axis"),
    ("reduce[mean]", "b t d -> b d", "(4,10,16)", "-", "mean over time"),
    ("reduce[mean]", "b t d -> b 1 d", "(4,10,16)", "-", "mean with keepdims"),
    ("reduce[mean]", "b (t 5) d -> b t d", "(4,10,16)", "-", "average pool by 5"),
    ("reduce[mean]", "... -> ", "()", "-", "mean of a scalar"),
    ("reduce[prod]", "a b c -> c", "(2,3,4)", "-", "product"),
    ("reduce[prod]", "a b -> ", "(0,3)", "-", "product over a zero-size axis is 1"),
    ("reduce[prod]", "a (b c) -> c", "(2,12)", "c=3", "product after a split"),
    ("reduce[any]", "a b c -> a", "(2,3,4)", "-", "any"),
    ("reduce[any]", "a b -> a", "(3,0)", "-", "any over a zero-size axis"),
    ("reduce[all]", "a b c -> (a c)", "(2,3,4)", "-", "all, merged output"),
    ("reduce[all]", "a b -> b", "(0,4)", "-", "all over a zero-size axis"),
    ("reduce_list[sum]", "b h w -> h w", "(4,5);(4,5);(4,5)", "-", "sum of a list"),
    ("reduce_list[max]", "b ... -> ...", "(3,);(3,)", "-", "max of a list"),
    ("reduce[sum]", "a b -> c", "(2,3)", "-", "right-only name"),
    ("reduce[max]", "a -> a 3", "(4,)", "-", "anonymous axis only on the right"),
    ("reduce[sum]", "a (b c) -> a", "(2,7)", "c=2", "not divisible"),
    ("reduce[sum]", "a (b c) -> a", "(2,6)", "-", "cannot infer"),
    ("reduce[prod]", "a b -> ... a", "(2,3)", "-", "ellipsis only on the right"),
    ("reduce[max]", "(a ...) -> a", "(6,)", "-", "ellipsis in parentheses on the left"),
    ("reduce[avg]", "a b -> a", "(2,3)", "-", "unknown reduction"),
    ("reduce[sum]", "a b -> a", "(2,3)", "a=3", "given size disagrees"),
    ("reduce[any]", "(a b) c -> a c", "(5,3)", "a=2", "not divisible (bool)"),
    ("reduce[sum]", "a b -> a", "(2,3)", "z=3", "size for an axis not in the pattern"),
    ("reduce[sum]", "a 3 -> a", "(2,4)", "-", "anonymous axis length disagrees"),
    ("reduce[min]", "a b -> a", "(3,0)", "-", "min over a zero-size axis"),
    ("reduce[max]", "a b -> b", "(0,3)", "-", "max over a zero-size axis"),
    ("reduce_list[sum]", "b h -> h", "(2,);(3,)", "-", "list of unequal shapes"),
    # --- repeat ---
    ("repeat", "a b -> a b c", "(2,3)", "c=4", "new trailing axis"),
    ("repeat", "h w -> c h w", "(3,4)", "c=5", "new leading axis"),
    ("repeat", "h w -> (h 2) (w 3)", "(3,4)", "-", "upsample with anonymous sizes"),
    ("repeat", "h w -> (2 h) w", "(3,4)", "-", "tile with an anonymous size"),
    ("repeat", "... -> ... 2", "(3,)", "-", "anonymous new axis after an ellipsis"),
    ("repeat", "... -> 3 ...", "()", "-", "scalar to (3,)"),
    ("repeat", "a -> a b c", "(2,)", "b=3,c=4", "two new axes"),
    ("repeat", "a -> (b a)", "(2,)", "b=3", "tile"),
    ("repeat", "a b -> (a r) b", "(2,3)", "r=0", "repeat zero times"),
    ("repeat", "a ... -> a ... 1", "(2,3,4)", "-", "unit after an ellipsis"),
    ("repeat", "a b -> a 1 b 5", "(2,3)", "-", "unit and anonymous"),
    ("repeat", "() a -> a b", "(1,3)", "b=2", "drop a unit, add an axis"),
    ("repeat", "a 1 -> a b", "(3,1)", "b=4", "replace a unit by a new axis"),
    ("repeat", "(a b) -> a b c", "(6,)", "a=2,c=2", "split and add"),
    ("repeat", "b s -> b (s r)", "(2,5)", "r=3", "interleaved repeat"),
    ("repeat", "a b -> a b 7", "(0,3)", "-", "zero-size input"),
    ("repeat", "x -> x y", "(4,)", "y=0", "new axis of size 0"),
    ("repeat_list", "b h -> b h c", "(3,);(3,)", "c=4", "list input"),
    ("repeat_list", "b -> (b r)", "();();()", "r=2", "list of scalars"),
    ("repeat", "a b -> a c", "(2,3)", "c=2", "left-only name"),
    ("repeat", "a -> a b", "(2,)", "-", "missing size for a new axis"),
    ("repeat", "a -> a (b c)", "(2,)", "b=2", "missing size inside a group"),
    ("repeat", "a -> a b", "(2,)", "b=2,z=3", "size for an axis not in the pattern"),
    ("repeat", "a -> a a", "(2,)", "-", "duplicate on the right"),
    ("repeat", "a 2 -> a", "(3,2)", "-", "anonymous axis only on the left"),
    ("repeat", "a -> a 0", "(3,)", "-", "anonymous axis of length 0"),
    ("repeat", "(a b) -> a b c", "(6,)", "c=2", "cannot infer the split"),
    ("repeat", "a -> ... a", "(2,)", "-", "ellipsis only on the right"),
    # --- einsum ---
    ("einsum", "i j, j k -> i k", "(2,3);(3,4)", "-", "matmul"),
    ("einsum", "b i j, b j k -> b i k", "(5,2,3);(5,3,4)", "-", "batched matmul"),
    ("einsum", "i j -> j i", "(2,3)", "-", "transpose"),
    ("einsum", "i j -> ", "(2,3)", "-", "sum all"),
    ("einsum", "i, i -> ", "(5,);(5,)", "-", "dot product"),
    ("einsum", "i, j -> i j", "(2,);(3,)", "-", "outer product"),
    ("einsum", "a a b -> a b", "(3,3,4)", "-", "partial diagonal"),
    ("einsum", "i i j j -> i j", "(2,2,3,3)", "-", "two diagonals"),
    ("einsum", "a b, a b -> a b", "(2,3);(2,3)", "-", "elementwise product"),
    ("einsum", "a b, b c, c d -> a d", "(2,3);(3,4);(4,5)", "-", "chain of three"),
    ("einsum", "a b, b c, c d, d e -> a e", "(2,3);(3,4);(4,5);(5,6)", "-", "chain of four"),
    ("einsum", "b h q d, b h k d -> b h q k", "(2,4,5,8);(2,4,7,8)", "-", "attention scores"),
    ("einsum", "batch seq dim, dim out -> batch seq out", "(2,5,8);(8,3)", "-", "linear layer"),
    ("einsum", "a _, _ -> a", "(2,3);(3,)", "-", "underscore as a name"),
    ("einsum", "i i, i -> i", "(3,3);(3,)", "-", "diagonal times vector"),
    ("einsum", "i j, j -> i", "(2,0);(0,)", "-", "zero-size contraction"),
    ("einsum", "i j, i j -> ", "(0,3);(0,3)", "-", "zero-size full contraction"),
    ("einsum", "... i j, ... j k -> ... i k", "(7,2,3);(7,3,4)", "-", "batched matmul with ellipsis"),
    ("einsum", "... i j, ... j k -> ... i k", "(5,7,2,3);(7,3,4)", "-", "ellipses of different rank"),
    ("einsum", "... i j, ... j k -> ... i k", "(5,1,2,3);(7,3,4)", "-", "ellipsis broadcasts a unit"),
    ("einsum", "... i, i -> ...", "(2,3,4);(4,)", "-", "contract the last axis"),
    ("einsum", "..., ... -> ...", "(3,1);(1,4)", "-", "ellipsis broadcasts both ways"),
    ("einsum", "i ..., i ... -> ...", "(2,3);(2,1)", "-", "leading name, trailing ellipsis"),
    ("einsum", "... -> ", "(2,3)", "-", "sum over an ellipsis"),
    ("einsum", "... i i -> ... i", "(2,3,3)", "-", "batched diagonal"),
    ("einsum", "..., i -> ... i", "();(4,)", "-", "scalar ellipsis"),
    ("einsum", "i j, j k -> i k", "(2,1);(3,4)", "-", "a named axis of size 1 against 3 (numpy broadcasts it)"),
    ("einsum", "i j, j k -> i k", "(2,3);(3,4,5)", "-", "operand rank too large"),
    ("einsum", "b i j, b j k -> b i k", "(5,2,3);(6,3,4)", "-", "batch sizes disagree"),
    ("einsum", "i i -> i", "(3,4)", "-", "diagonal of a non-square"),
    ("einsum", "i i -> i", "(3,1)", "-", "diagonal of 3 by 1"),
    ("einsum", "i j -> i k", "(2,3)", "-", "unknown name on the right"),
    ("einsum", "i j -> i i", "(2,3)", "-", "duplicate on the right"),
    ("einsum", "i j, j k", "(2,3);(3,4)", "-", "no arrow"),
    ("einsum", "i j, j k -> i k", "(2,3)", "-", "fewer operands than the pattern"),
    ("einsum", "i j -> i j", "(2,3);(2,3)", "-", "more operands than the pattern"),
    ("einsum", "i j -> ... i", "(2,3)", "-", "ellipsis only on the right"),
    ("einsum", "... i, ... i -> ... i", "(2,3);(4,3)", "-", "ellipses do not broadcast"),
    ("einsum", "i j -> j i", "()", "-", "scalar operand"),
    ("einsum", "... i j -> ... j i", "(2,)", "-", "too few axes for the named part"),
    ("einsum", "i j, j k -> (i k", "(2,3);(3,4)", "-", "unclosed parenthesis"),
    # --- pack / unpack ---
    ("pack", "* d", "(2,3,4);(5,4)", "-", "pack leading axes"),
    ("pack", "b *", "(2,3);(2,3,4);(2,)", "-", "pack trailing axes, one empty"),
    ("pack", "*", "(3,);(4,);()", "-", "pack everything"),
    ("pack", "a * b", "(2,3,5);(2,5)", "-", "star in the middle"),
    ("pack", "* h w", "(3,4,5);(4,5)", "-", "stack and concatenate"),
    ("pack", "h *", "(2,0);(2,3)", "-", "a zero-size part"),
    ("pack", "b *", "(2,3,4)", "-", "pack a single tensor"),
    ("pack", "* c", "(0,3);(2,3)", "-", "zero-size leading part"),
    ("pack", "a b *", "(2,);(2,3)", "-", "tensor with too few axes"),
    ("pack", "a b", "(2,3);(2,3)", "-", "no star"),
    ("pack", "a * *", "(2,3);(2,3)", "-", "two stars"),
    ("pack", "a * b", "(2,3,4);(3,3,4)", "-", "fixed axes disagree"),
    ("pack", "(a b) *", "(2,3)", "-", "parentheses in pack"),
    ("pack", "... *", "(2,3)", "-", "ellipsis in pack"),
    ("unpack", "* d", "(11,4)", "ps=[[2,3],[5]]", "unpack leading axes"),
    ("unpack", "b *", "(2,16)", "ps=[[3],[3,4],[]]", "unpack with an empty packed shape"),
    ("unpack", "*", "(8,)", "ps=[[3],[-1],[]]", "infer the middle part"),
    ("unpack", "a * b", "(2,4,5)", "ps=[[-1],[]]", "infer the first part"),
    ("unpack", "* h w", "(4,4,5)", "ps=[[3],[1]]", "leading star"),
    ("unpack", "h *", "(2,12)", "ps=[[3,-1]]", "one part, infer inside it"),
    ("unpack", "*", "(6,)", "ps=[[2,-1]]", "one part on a 1-d tensor"),
    ("unpack", "*", "(0,)", "ps=[[0],[-1]]", "zero-size"),
    ("unpack", "*", "(5,)", "ps=[[3],[-1],[4]]", "parts overflow the axis; einops slices past it without noticing"),
    ("unpack", "*", "(5,)", "ps=[[-1],[-1]]", "two -1"),
    ("unpack", "* d", "(11,4)", "ps=[[2,3],[6]]", "parts do not add up"),
    ("unpack", "* d", "(11,4,2)", "ps=[[2,3],[5]]", "input rank too large"),
    ("unpack", "a *", "(2,)", "ps=[[1],[1]]", "input rank too small"),
    ("unpack", "* *", "(6,)", "ps=[[3],[3]]", "two stars"),
    ("unpack", "*", "(6,)", "ps=[[4,-1]]", "-1 not divisible"),
    ("unpack", "*", "(5,)", "ps=[[0,-1],[5]]", "-1 next to a zero"),
    # --- parse_shape ---
    ("parse_shape", "b c h w", "(2,3,4,5)", "-", "all named"),
    ("parse_shape", "b _ _ w", "(2,3,4,5)", "-", "two skipped"),
    ("parse_shape", "_ ...", "(2,3)", "-", "nothing named"),
    ("parse_shape", "... _", "(2,3)", "-", "nothing named, ellipsis first"),
    ("parse_shape", "b ... c", "(2,3)", "-", "empty ellipsis"),
    ("parse_shape", "b ... c", "(2,3,4,5)", "-", "ellipsis in the middle"),
    ("parse_shape", "batch 1 seq", "(4,1,7)", "-", "a unit"),
    ("parse_shape", "a 3 _", "(2,3,4)", "-", "an anonymous axis"),
    ("parse_shape", "", "()", "-", "empty pattern on a scalar"),
    ("parse_shape", "() a", "(1,5)", "-", "() unit first"),
    ("parse_shape", "a (b)", "(2,3)", "-", "a one-axis group is not a composition"),
    ("parse_shape", "a b", "(2,3,4)", "-", "too many axes"),
    ("parse_shape", "... a b", "(2,)", "-", "too few axes with an ellipsis"),
    ("parse_shape", "a (b c)", "(2,12)", "-", "composition"),
    ("parse_shape", "a 3", "(2,4)", "-", "anonymous length disagrees"),
    ("parse_shape", "a ()", "(2,3)", "-", "unit that is not 1"),
    ("parse_shape", "x _ x", "(2,3,2)", "-", "duplicate name"),
    ("parse_shape", "a ... b ...", "(2,3,4)", "-", "two ellipses"),
    ("parse_shape", "a_ b", "(2,3)", "-", "invalid name"),
    ("parse_shape", "a 0", "(2,0)", "-", "anonymous axis of length 0"),
    # --- parse_expression ---
    ("parse_expression", "a (b c) ...", "-", "-", "names, group, ellipsis"),
    ("parse_expression", "(...)", "-", "-", "ellipsis in a group"),
    ("parse_expression", "a () 1 b", "-", "-", "units"),
    ("parse_expression", "(a 1 b)", "-", "-", "1 inside a group is dropped"),
    ("parse_expression", "", "-", "-", "empty"),
    ("parse_expression", "a2 b_c CamelCase a__b", "-", "-", "name forms"),
    ("parse_expression", "(a 3 b)", "-", "-", "anonymous axis in a group"),
    ("parse_expression", "a … b", "-", "-", "unicode ellipsis"),
    ("parse_expression", "pre…", "-", "-", "name glued to a unicode ellipsis"),
    ("parse_expression", "a (b (c))", "-", "-", "nested"),
    ("parse_expression", "a b)", "-", "-", "unopened parenthesis"),
    ("parse_expression", "(a b", "-", "-", "unclosed parenthesis"),
    ("parse_expression", "a .. b", "-", "-", "two dots"),
    ("parse_expression", "a 0", "-", "-", "anonymous axis of length 0"),
    ("parse_expression", "__a", "-", "-", "leading underscores"),
    ("parse_expression", "1a", "-", "-", "starts with a digit"),
    ("parse_expression", "a -1", "-", "-", "negative number"),
]


def reexec_with_fixed_hash_seed():
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def parse_shapes(text):
    if text == "-":
        return []
    return [tuple(ast.literal_eval(part)) for part in text.split(";")]


def parse_kwargs(text):
    if text == "-":
        return {}
    if text.startswith("ps="):
        return {"ps": ast.literal_eval(text[3:])}
    return {k: int(v) for k, v in (item.split("=") for item in text.split(","))}


def fmt_shape(shape):
    shape = tuple(int(d) for d in shape)
    return "(" + ",".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def fmt_composition(expr, ellipsis, anonymous_axis):
    def axis(x):
        if x == ellipsis:
            return "..."
        return str(x.value) if isinstance(x, anonymous_axis) else x

    parts = ["..." if group == ellipsis else "(" + " ".join(axis(x) for x in group) + ")"
             for group in expr.composition]
    return "OK composition=[" + " ".join(parts) + "]"


def error_detail(exc):
    """`Type: message`, without einops' wrapper lines (`Error while processing ...` and
    `Input tensor shape ... Additional info ...`), line breaks written ' \\n '."""
    lines = str(exc).split("\n")
    if lines and lines[0].startswith(" Error while processing"):
        lines = lines[2:]
    message = " \\n ".join(line.strip() for line in lines if line.strip())
    return f"{type(exc).__name__}: {message}".replace("\t", " ")


def evaluate(op, pattern, shapes, kwargs):
    """einops' answer for one case, in the TSV's `expected` format."""
    import numpy as np
    import einops
    from einops.parsing import AnonymousAxis, ParsedExpression, _ellipsis

    base, reduction = op, None
    if "[" in op:
        base, reduction = op[:op.index("[")], op[op.index("[") + 1:-1]
    is_list = base.endswith("_list")
    base = base.removesuffix("_list")
    dtype = bool if reduction in ("any", "all") else np.float64
    arrays = [np.zeros(s, dtype=dtype) for s in shapes]
    tensor = arrays if is_list else (arrays[0] if arrays else None)

    if base == "rearrange":
        return fmt_shape(einops.rearrange(tensor, pattern, **kwargs).shape)
    if base == "reduce":
        return fmt_shape(einops.reduce(tensor, pattern, reduction, **kwargs).shape)
    if base == "repeat":
        return fmt_shape(einops.repeat(tensor, pattern, **kwargs).shape)
    if base == "einsum":
        assert not kwargs, "einops.einsum takes no axis sizes"
        return fmt_shape(einops.einsum(*arrays, pattern).shape)
    if base == "pack":
        packed, ps = einops.pack(arrays, pattern)
        return f"{fmt_shape(packed.shape)} ps=[{';'.join(fmt_shape(p) for p in ps)}]"
    if base == "unpack":
        parts = einops.unpack(arrays[0], kwargs["ps"], pattern)
        return "[" + ";".join(fmt_shape(p.shape) for p in parts) + "]"
    if base == "parse_shape":
        sizes = einops.parse_shape(arrays[0], pattern)
        return "{" + ",".join(f"{k}:{v}" for k, v in sizes.items()) + "}"
    if base == "parse_expression":
        return fmt_composition(ParsedExpression(pattern), _ellipsis, AnonymousAxis)
    raise ValueError(f"unknown op {op}")


def existing_keys():
    """(op, pattern with normalized spaces, shapes, kwargs) of every einops_cases.tsv row."""
    keys, header = set(), None
    for line in EXISTING.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            header = cells
            continue
        row = dict(zip(header, cells))
        keys.add((row["op"], " ".join(row["pattern"].split()), row["input_shapes"], row["kwargs"]))
    return keys


def main():
    reexec_with_fixed_hash_seed()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()

    import numpy as np
    import einops

    old, seen = existing_keys(), set()
    rows = []
    for op, pattern, shapes, kwargs, note in CASES:
        key = (op, " ".join(pattern.split()), shapes, kwargs)
        if key in old:
            sys.exit(f"case copies a row of einops_cases.tsv: {key}")
        if key in seen:
            sys.exit(f"case listed twice: {key}")
        seen.add(key)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 'axis' names, mean of empty slices
            try:
                expected, detail = evaluate(op, pattern, parse_shapes(shapes), parse_kwargs(kwargs)), "-"
            except Exception as e:  # einops' answer is an error of any type
                expected, detail = "ERROR", error_detail(e)
        rows.append((op, pattern, shapes, kwargs, expected, detail, f"generated: {note}"))

    command = "python3 tests/reference/generate_extra_einops_cases.py"
    n_errors = sum(r[4] == "ERROR" for r in rows)
    header = [
        "# Extra einops reference cases, held back from einops_cases.tsv: like its rows in kind, none a copy of one.",
        f"# Produced by `{command}` (it sets PYTHONHASHSEED=0) with einops {einops.__version__},"
        f" numpy {np.__version__}, Python {platform.python_version()}. Do not edit by hand: edit the script and rerun it.",
        "# Expected = einops' result on np.zeros(shape) (dtype bool for any/all, float64 otherwise), or ERROR with"
        " einops' exception type and message (wrapper lines removed; ' \\n ' = line break).",
        "# Columns and formats as in tests/conformance/data/einops_cases.tsv; read by tests/cli/run_ein_shape_rows.py.",
        f"# {len(rows)} rows, {n_errors} of them ERROR.",
        "op\tpattern\tinput_shapes\tkwargs\texpected\terror_detail\tsource",
    ]
    for r in rows:
        assert all("\t" not in c and "\n" not in c for c in r), r
    args.output.write_text("\n".join(header + ["\t".join(r) for r in rows]) + "\n", encoding="utf-8")
    print(f"wrote {args.output}: {len(rows)} rows, {n_errors} ERROR")


if __name__ == "__main__":
    main()
