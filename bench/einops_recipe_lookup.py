#!/usr/bin/env python3
"""einops' side of the cached-lookup comparison in BENCHMARKS.md.

Times what einops does per call before touching data, for a pattern and shape it has seen
before: the lru-cached recipe (_prepare_transformation_recipe) and the lru-cached shape
reconstruction (_reconstruct_from_shape). Also times a whole rearrange on a tiny array.
Needs `pip install einops numpy`; not part of the test suite.

  python3 bench/einops_recipe_lookup.py
"""
import statistics
import timeit

import numpy as np
import einops
from einops import einops as impl

PATTERN = "b s (h d) -> b h s d"
SHAPE = (32, 512, 768)


def lookup():
    recipe = impl._prepare_transformation_recipe(PATTERN, "rearrange", axes_names=("h",), ndim=3)
    return impl._reconstruct_from_shape(recipe, SHAPE, (("h", 12),))


def median_ns(fn, number=200_000, repeat=5):
    return statistics.median(t / number * 1e9 for t in timeit.repeat(fn, number=number, repeat=repeat))


x = np.zeros((2, 4, 24), dtype=np.float32)
print(f"einops {einops.__version__}, numpy {np.__version__}")
print(f"cached recipe + shape lookup: {median_ns(lookup):.0f} ns (median of 5)")
print(f"rearrange on a (2,4,24) array: {median_ns(lambda: einops.rearrange(x, PATTERN, h=12), 50_000):.0f} ns")
