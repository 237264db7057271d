#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into OUT/<target>/, one file per seed (named by its
hash): the conformance tables' rows as pattern and shape-spec inputs, the map expressions the
tests and docs use, every .ein file of examples/, stdlib/ and tests/, small safetensors and
token files built here, and the committed inputs of tests/fuzz/regressions/<target>/ (each a
bug the fuzzer once found). Run by scripts/fuzz.sh; seeds are made at run time, not committed.

    python3 tests/fuzz/make_seeds.py OUT [SAFETENSORS_FIXTURE_BINARY]
"""
import hashlib
import json
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT / "tests" / "conformance" / "data"


def rows(path):
    """The data rows of a conformance TSV as dicts ('#' comments, then a header line)."""
    lines = [l for l in path.read_text().splitlines() if l and not l.startswith("#")]
    header = lines[0].split("\t")
    return [dict(zip(header, l.split("\t"))) for l in lines[1:]]


def pattern_seeds():
    """`op  pattern  shapes  kwargs` rows (fuzz_pattern.cpp's input form)."""
    out = []
    for path in [CONFORMANCE / "einops_cases.tsv", ROOT / "tests/cli/held_back_cases.tsv"]:
        for r in rows(path):
            kwargs = r["kwargs"]
            if kwargs.startswith("ps="):  # [[2],[1,5]] -> (2,);(1,5)
                inner = json.loads(kwargs[3:].replace("(", "[").replace(")", "]"))
                kwargs = "ps=" + ";".join("(" + ",".join(map(str, s)) + ("," if len(s) == 1 else "") + ")" for s in inner)
            out.append("\t".join([r["op"], r["pattern"], r["input_shapes"], kwargs]))
    for r in rows(CONFORMANCE / "einops_identities.tsv"):
        for expr in (r["einops_expression"], r["equivalent"]):
            m = re.match(r"(\w+)\(x, '([^']*)'(.*)\)", expr)
            if m:
                kwargs = ",".join(k.strip() for k in m.group(3).split(",") if "=" in k)
                op = m.group(1) if m.group(1) != "reduce" else "reduce[sum]"
                out.append("\t".join([op, m.group(2), r["input_shape"], kwargs or "-"]))
    for r in rows(CONFORMANCE / "opt_einsum_cases.tsv"):  # `ab,bc->ac` as `a b, b c -> a c`
        lhs, _, rhs = r["equation"].partition("->")
        pattern = ", ".join(" ".join(t) for t in lhs.split(",")) + " -> " + " ".join(rhs)
        out.append("\t".join(["einsum", pattern, r["shapes"], "-"]))
    for r in rows(CONFORMANCE / "einx_cases.tsv"):  # another notation: good near-misses
        out.append(r["expression"])
    return out


def shape_spec_seeds():
    """One line per tensor: `Float32[b c]<TAB>(4,3):f32` (fuzz_shape_spec.cpp's input form)."""
    out = []
    for r in rows(CONFORMANCE / "jaxtyping_cases.tsv"):
        specs = re.findall(r"(\w+)\[A, '([^']*)'\]", r["annotation"])
        args = re.findall(r"(\([0-9,]*\)):(\w+)", r["arguments"])
        lines = []
        for i, (dtype, dims) in enumerate(specs):
            spec = f"{dtype}[{dims}]"
            lines.append(f"{spec}\t{args[i][0]}:{args[i][1]}" if i < len(args) else spec)
        if lines:
            out.append("\n".join(lines))
        out.extend(dims for _, dims in specs)  # the bare dims string is a spec too
    return out


def map_seeds():
    """Map expressions from tests and docs, each with a shape per input on a second line."""
    found = set()
    for base in ["tests", "api", "examples", "docs", "compiler", "script"]:
        for f in (ROOT / base).rglob("*"):
            if f.suffix in (".cpp", ".h", ".md", ".py"):
                text = f.read_text(errors="replace")
                found.update(re.findall(r'(?:map|parse_map|map_program)\("([^"\\]+)"', text))
                found.update(m for m in re.findall(r"`([^`\n]*->[^`\n]*)`", text) if "[" in m)
    sizes = {}
    out = []
    for expr in sorted(found):
        lhs = expr.split("->")[0]
        shapes = []
        for dims in re.findall(r"\[([^\]]*)\]", lhs):
            names = dims.split()
            shapes.append("(" + ",".join(str(sizes.setdefault(n, 2 + len(sizes) % 5)) for n in names)
                          + ("," if len(names) == 1 else "") + ")")
        out.append(expr)
        out.append(expr + "\n" + ";".join(shapes))
    return out


def script_seeds():
    return [f.read_text() for base in ["examples", "stdlib", "tests"]
            for f in sorted((ROOT / base).rglob("*.ein"))]


def safetensors_file(tensors, metadata=None):
    """A safetensors file: tensors is [(name, dtype, shape, bytes)]."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def safetensors_seeds(fixture):
    f32 = struct.pack("<6f", *range(6))
    out = [
        safetensors_file([("w", "F32", [2, 3], f32)], {"step": "7", "seed": "0"}),
        safetensors_file([("a", "F64", [2], struct.pack("<2d", 1.5, -2)), ("b", "I8", [3], b"\x01\x02\x03"),
                          ("c", "BOOL", [2], b"\x00\x01"), ("d", "BF16", [], b"\x80\x3f"),
                          ("e", "U8", [0], b""), ("f", "F8_E4M3", [1, 1], b"\x38")]),
        safetensors_file([("model.w", "F16", [2, 2], b"\x00\x3c" * 4), ("optim.m.w", "I32", [1], b"\x05\x00\x00\x00")],
                         {"step": "7", "xxh3_64:model.w": "0123456789abcdef"}),
        safetensors_file([]),
        safetensors_file([], {}),
        safetensors_file([("u", "U16", [1], b"\x00\x00")]),
    ]
    if fixture:  # every dtype, with real checksums (tests/runtime/write_safetensors_fixture.cpp)
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "fixture.safetensors"
            if subprocess.run([fixture, str(path)], capture_output=True).returncode == 0:
                out.append(path.read_bytes())
    return out


def token_file_seeds():
    """fuzz_token_file.cpp's 8-byte option header, then the tokens."""
    def header(flags, batch, context, vocab, begin=0, end=-1, k=1):
        return struct.pack("<BbbhbbB", flags, batch, context, vocab, begin, end, k & 0xFF)
    u16 = struct.pack("<20H", *range(20))
    i32 = struct.pack("<12i", *range(12))
    return [
        header(0, 2, 4, 256) + u16,
        header(2, 2, 3, 0) + u16,             # sequential
        header(1 | 4, 1, 2, 16) + i32,        # int32, check every token
        header(1 | 2 | 8, 3, 2, 0, 2, 10) + i32,  # a token range, drop_last
        header(16, 1, 1, 0) + u16,            # dtype from the extension
        header(1, 1, 1, 5) + struct.pack("<3i", 1, -4, 9),  # negative and out-of-vocab tokens
        header(0, 1, 1, 0) + b"\x01",         # not a whole token
    ]


def write(out_dir, target, seeds):
    d = out_dir / target
    d.mkdir(parents=True, exist_ok=True)
    for s in seeds:
        data = s.encode() if isinstance(s, str) else s
        (d / hashlib.sha1(data).hexdigest()).write_bytes(data)
    regressions = ROOT / "tests" / "fuzz" / "regressions" / target
    for f in sorted(regressions.glob("*")) if regressions.is_dir() else []:
        (d / f.name).write_bytes(f.read_bytes())
    return len(list(d.iterdir()))


def main():
    out_dir = pathlib.Path(sys.argv[1])
    fixture = sys.argv[2] if len(sys.argv) > 2 and pathlib.Path(sys.argv[2]).is_file() else None
    for target, seeds in [("pattern", pattern_seeds()), ("shape_spec", shape_spec_seeds()),
                          ("map", map_seeds()), ("script", script_seeds()),
                          ("safetensors", safetensors_seeds(fixture)),
                          ("token_file", token_file_seeds())]:
        print(f"make_seeds: {target}: {write(out_dir, target, seeds)} seeds")


if __name__ == "__main__":
    main()
