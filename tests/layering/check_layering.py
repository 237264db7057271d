#!/usr/bin/env python3
"""Checks that the source tree's layers depend one way only (docs/architecture.md).

Every quoted or <ein/...> include of every source file outside tests/, bench/ and examples/
is resolved to the layer of the file it names; a layer may include only layers of a lower
rank (runtime's sub-folders are one layer). It also checks that PEGTL stays in dsl/, MLIR and
LLVM in runtime/jit/llvm_jit.cpp, the CUDA toolkit's headers in runtime/cuda/, and that the
public headers under include/ein/ include nothing but <ein/...> and the standard library.
Usage: check_layering.py SOURCE_ROOT. Prints each violation as file:line and exits 1 on any.
"""
import os
import re
import sys

# rank: a layer includes only layers of a strictly lower rank (same family excepted).
RANKS = {
    "include": 0, "core": 1,
    "dsl": 1, "runtime": 1, "runtime/jit": 1, "runtime/blas": 1, "runtime/cuda": 1,
    "runtime/dist": 1,
    "compiler/kernel": 2,
    "compiler/sema": 3, "compiler/graph": 3, "compiler/emit": 3, "compiler/reference": 3,
    "compiler/autodiff": 4, "compiler/decode": 4, "compiler/fuse": 4,
    "compiler/cost": 5,
    "compiler": 6,          # compiler/pipeline.{h,cpp}: the stage chain over every stage
    "exec": 7,
    "api": 8,
    "script": 9,
    "tools": 10,
}
FAMILIES = {"runtime", "runtime/jit", "runtime/blas", "runtime/cuda", "runtime/dist"}
# Third-party headers that must stay in one place (the build stays fast, the code easy to see).
CONFINED = [
    (re.compile(r"tao/pegtl"), ("dsl/",), "PEGTL"),
    (re.compile(r"^(mlir|llvm)/"), ("runtime/jit/llvm_jit.cpp",), "MLIR/LLVM"),
    (re.compile(r"^(cuda|cuda_runtime|nvrtc|cublasLt)\.h$"), ("runtime/cuda/",), "the CUDA toolkit"),
    (re.compile(r"^mpi\.h$"), ("runtime/dist/mpi_communicator.cpp",), "MPI"),
]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
LAYERED = ("include", "core", "dsl", "runtime", "compiler", "exec", "api", "script", "tools")


def layer(path):
    parts = path.split("/")
    if parts[0] in ("compiler", "runtime") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def main(root):
    problems = []
    for top in LAYERED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".def")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                text = open(os.path.join(root, path), encoding="utf-8").read()
                for m in INCLUDE.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    where = f"{path}:{line}"
                    bracket, target = m.group(1), m.group(2)
                    for pattern, homes, what in CONFINED:
                        if pattern.search(target) and not path.startswith(homes):
                            problems.append(f"{where}: {what} ({target}) outside {', '.join(homes)}")
                    if target.startswith("ein/"):
                        target = "include/" + target
                    elif bracket == "<" or not os.path.exists(os.path.join(root, target)):
                        continue  # the standard library or a third-party header
                    if path.startswith("include/") and bracket == '"':
                        problems.append(f"{where}: public header includes internal {target}")
                    a, b = layer(path), layer(target)
                    if a == b or (a in FAMILIES and b in FAMILIES):
                        continue
                    if a not in RANKS or b not in RANKS:
                        problems.append(f"{where}: {target} is in no known layer")
                    elif RANKS[b] >= RANKS[a]:
                        problems.append(f"{where}: {a} (rank {RANKS[a]}) includes {target} "
                                        f"({b}, rank {RANKS[b]})")
    for p in problems:
        print(p)
    print(f"layering: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
