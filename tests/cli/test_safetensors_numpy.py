#!/usr/bin/env python3
"""Reads a safetensors file written by ein with the standard library and numpy only, following
the format's specification (https://github.com/huggingface/safetensors): an 8-byte
little-endian header size, a JSON header, then contiguous row-major little-endian tensors.
Checks every dtype's values, the layout rules and the metadata. When the Python safetensors
package is installed, it must read the same values. Then the other way: numpy writes a file
(header and data in different orders, no padding) and ein must load the same values.

Usage: test_safetensors_numpy.py PATH/TO/ein_safetensors_fixture
Exits 77 (CTest's SKIP_RETURN_CODE) when numpy is missing."""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed for", sys.executable)
    sys.exit(77)


def f8_values(raw, exp_bits, man_bits, bias, e4m3fn):
    """Decodes OCP float8 bytes (E4M3FN: no inf, NaN = S.1111.111; E5M2: IEEE-like)."""
    out = []
    for b in raw.tobytes():
        sign = -1.0 if b >> 7 else 1.0
        exp = (b >> man_bits) & ((1 << exp_bits) - 1)
        man = b & ((1 << man_bits) - 1)
        top = (1 << exp_bits) - 1
        if e4m3fn and exp == top and man == (1 << man_bits) - 1:
            out.append(float("nan"))
        elif not e4m3fn and exp == top:
            out.append(sign * float("inf") if man == 0 else float("nan"))
        elif exp == 0:
            out.append(sign * man / (1 << man_bits) * 2.0 ** (1 - bias))
        else:
            out.append(sign * (1 + man / (1 << man_bits)) * 2.0 ** (exp - bias))
    return np.array(out, dtype=np.float64)


def decode(dtype, raw, shape):
    """The tensor's values as a numpy array (float64 for the formats numpy lacks)."""
    simple = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "I8": "i1", "U8": "u1"}
    if dtype in simple:
        return np.frombuffer(raw, dtype=simple[dtype]).reshape(shape)
    u8 = np.frombuffer(raw, dtype="u1")
    if dtype == "BOOL":
        assert set(u8.tolist()) <= {0, 1}, "BOOL bytes must be 0 or 1"
        return u8.astype(bool).reshape(shape)
    if dtype == "BF16":  # the top half of an f32
        u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u16.view("<f4").reshape(shape)
    if dtype == "F8_E4M3":
        return f8_values(u8, 4, 3, 7, True).reshape(shape)
    if dtype == "F8_E5M2":
        return f8_values(u8, 5, 2, 15, False).reshape(shape)
    raise AssertionError(f"unexpected dtype {dtype}")


def read_safetensors(path):
    """(tensors in data order as {name: array}, metadata, dtypes) per the specification."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), "header size past the end of the file"
    text = data[8:8 + n].decode("utf-8")
    assert text.startswith("{"), "the header must start with '{'"
    assert n % 8 == 0, f"ein pads the header to a multiple of 8, got {n}"
    header = json.loads(text)
    metadata = header.pop("__metadata__", {})
    buffer = data[8 + n:]
    entries = sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    cursor = 0
    tensors, dtypes = {}, {}
    for name, info in entries:
        begin, end = info["data_offsets"]
        assert begin == cursor, f"{name}: gap or overlap at {begin} (expected {cursor})"
        tensors[name] = decode(info["dtype"], buffer[begin:end], info["shape"])
        dtypes[name] = info["dtype"]
        cursor = end
    assert cursor == len(buffer), "trailing bytes after the last tensor"
    assert list(tensors) == list(header), "data order differs from header order"
    return tensors, metadata, dtypes


# numpy's dtype strings and the safetensors names of the dtypes numpy has.
NUMPY_TO_SAFETENSORS = {"<f8": "F64", "<f4": "F32", "<f2": "F16", "<i8": "I64", "<i4": "I32",
                        "|i1": "I8", "|u1": "U8", "|b1": "BOOL"}


def write_safetensors(path, tensors, data_order, metadata):
    """A safetensors file from numpy arrays, as another writer might lay it out: the header's
    keys in one order, the data in another (`data_order`), and no padding after the JSON."""
    offsets, blobs, cursor = {}, [], 0
    for name in data_order:
        blob = np.ascontiguousarray(tensors[name]).tobytes()
        offsets[name] = [cursor, cursor + len(blob)]
        blobs.append(blob)
        cursor += len(blob)
    header = {"__metadata__": metadata}
    for name, array in tensors.items():
        header[name] = {"dtype": NUMPY_TO_SAFETENSORS[array.dtype.str], "shape": list(array.shape),
                        "data_offsets": offsets[name]}
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check_ein_reads_numpy_file(fixture, tmp):
    """ein loads a file numpy wrote: values, dtypes, shapes, data order and metadata."""
    rng = np.random.default_rng(7)
    tensors = {
        "w": rng.standard_normal((2, 3)).astype("<f4"),
        "ids": rng.integers(-2**40, 2**40, size=4).astype("<i8"),
        "mask": np.array([True, False, True]),
        "h": np.array([0.5, -1.25], dtype="<f2"),
        "byte": np.array(200, dtype="u1"),
        "d": rng.standard_normal(5).astype("<f8"),
        "none": np.zeros((0, 3), dtype="<f8"),
        "i": np.array([-128, 127], dtype="i1"),
        "j": np.array([[1, -2]], dtype="<i4"),
    }
    order = ["mask", "d", "none", "w", "i", "byte", "h", "j", "ids"]
    path = os.path.join(tmp, "numpy.safetensors")
    write_safetensors(path, tensors, order, {"lr": "3e-4", "step": "17"})
    out = subprocess.run([fixture, "--dump", path], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    meta = [line.split(" ", 2) for line in out if line.startswith("meta ")]
    assert {k: v for _, k, v in meta} == {"lr": "3e-4", "step": "17"}, meta
    ein_dtypes = {"F64": "f64", "F32": "f32", "F16": "f16", "I64": "i64", "I32": "i32",
                  "I8": "i8", "U8": "u8", "BOOL": "bool"}
    seen = []
    for line in out:
        if not line.startswith("tensor "):
            continue
        m = re.match(r"tensor (\S+) (\S+) \[(.*?)\](.*)", line)
        name, dtype, shape, values = m.group(1), m.group(2), m.group(3), m.group(4).split()
        seen.append(name)
        array = tensors[name]
        assert dtype == ein_dtypes[NUMPY_TO_SAFETENSORS[array.dtype.str]], (name, dtype)
        assert [int(s) for s in shape.split(", ") if s] == list(array.shape), (name, shape)
        got = np.array([float(v) for v in values], dtype=np.float64)
        # %.17g round-trips every f64; i64 values here stay below 2**53, so they are exact too.
        np.testing.assert_array_equal(got, array.astype(np.float64).ravel(), err_msg=name)
    assert seen == order, f"ein's file order {seen} is not the data order {order}"


def main():
    fixture = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fixture.safetensors")
        subprocess.run([fixture, path], check=True)
        tensors, metadata, dtypes = read_safetensors(path)

        assert metadata == {"seed": "1234", "note": "written by ein"}, metadata
        x = (np.arange(12, dtype=np.float64) * 0.5 - 3).reshape(3, 4)
        i = (np.arange(12) - 6).reshape(3, 4)
        expected_dtypes = {"f64": "F64", "f32": "F32", "f16": "F16", "bf16": "BF16",
                           "f8e4m3": "F8_E4M3", "f8e5m2": "F8_E5M2", "i64": "I64",
                           "i32": "I32", "i8": "I8", "u8": "U8", "bool": "BOOL",
                           "transposed": "F32", "scalar": "F32", "empty": "F32"}
        assert dtypes == expected_dtypes, dtypes
        for name in ["f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2"]:
            np.testing.assert_array_equal(tensors[name].astype(np.float64), x, err_msg=name)
        for name in ["i64", "i32", "i8"]:
            np.testing.assert_array_equal(tensors[name], i, err_msg=name)
        np.testing.assert_array_equal(tensors["u8"], np.arange(250, 256))
        np.testing.assert_array_equal(tensors["bool"], [True, False, False, True, True])
        np.testing.assert_array_equal(tensors["transposed"], x.T.astype(np.float32))
        assert tensors["scalar"].shape == () and tensors["scalar"] == 2.5
        assert tensors["empty"].shape == (2, 0)
        check_ein_reads_numpy_file(fixture, tmp)

        try:
            from safetensors.numpy import load_file
        except ImportError:
            print("note: the safetensors package is not installed; checked with numpy only")
        else:
            loaded = load_file(path)
            for name in ["f64", "f32", "f16", "i64", "i32", "i8", "u8", "bool", "transposed"]:
                np.testing.assert_array_equal(loaded[name], tensors[name], err_msg=name)
            print("the safetensors package reads the same values")
    print(f"ok: {len(tensors)} tensors and the metadata read with numpy per the specification;"
          " ein reads a file numpy wrote")


if __name__ == "__main__":
    main()
