"""The hostile values' catalogue: what a program returns, or writes to its value pipe, and the
verdicts each may get. ``test_hostile_values.py`` runs it through a real pool;
tests/integration/test_hostile_programs.py through the training loop."""

from __future__ import annotations

from common.types import Verdict

ISCLOSE = ("import math", ("assert math.isclose(f(1), 2.5)",))

# Writes one frame to the value pipe (fd 3) as the harness would frame it, with any bytes.
WRITE = """
import json, os, struct
def write(body):
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    os.write(3, struct.pack(">I", len(body)) + body)
def send(record):
    write(json.dumps(record))
"""

# name: (program, (setup, tests) or None for F_TESTS, the verdicts it may get)
FAILED = {Verdict.FAILED}
RETURNS = {
    "huge_int": ("def f(x):\n    return 10**6000", None, FAILED),
    "huge_negative_int": ("def f(x):\n    return -(10**6000)", None, FAILED),
    "huge_int_in_a_tuple_key": ("def f(x):\n    return {(10**5000, 1): [10**9000]}", None, FAILED),
    "huge_int_for_isclose": ("def f(x):\n    return 10**6000", ISCLOSE, FAILED),
    "int_over_the_value_budget": ("def f(x):\n    return 16**1_000_001", None, FAILED),
    "deep_list": (
        "def f(x):\n    v = []\n    for _ in range(100_000):\n        v = [v]\n    return v",
        None,
        FAILED,
    ),
    "deep_dict": (
        "def f(x):\n    v = {}\n    for _ in range(5_000):\n        v = {'k': v}\n    return v",
        None,
        FAILED,
    ),
    "deep_within_budget": (
        "def f(x):\n    v = 1\n    for _ in range(60):\n        v = (v,)\n    return v",
        None,
        FAILED,
    ),
    "huge_string": ("def f(x):\n    return 'x' * 10_000_000", None, FAILED),
    "string_just_under_the_budget": ("def f(x):\n    return 'x' * 999_000", None, FAILED),
    "non_ascii_string_over_a_frame": (
        "def f(x):\n    return '\\u00e9' * 900_000",
        None,
        {Verdict.OUTPUT_LIMIT},
    ),
    "unhashable_object": (
        "class U:\n    __hash__ = None\n    def __eq__(self, other):\n        raise ValueError\n"
        "def f(x):\n    return [U(), {1: [U()]}]",
        None,
        FAILED,
    ),
    "lying_hash_keys": (
        "import random\nclass K(int):\n    def __hash__(self):\n"
        "        return hash(random.random())\n"
        "    def __eq__(self, other):\n        return False\n"
        "def f(x):\n    return {K(1): 1 for _ in range(100)}",
        None,
        FAILED,
    ),
    "colliding_set": (
        "def f(x):\n    return {1 + k * (2**61 - 1) for k in range(2000)}",
        None,
        FAILED,
    ),
    "self_referential_list": ("def f(x):\n    v = []\n    v.append(v)\n    return v", None, FAILED),
    "self_referential_dict": ("def f(x):\n    v = {}\n    v['v'] = v\n    return v", None, FAILED),
    "non_utf8_bytes": ("def f(x):\n    return b'\\xff\\xfe'", None, FAILED),
    "lone_surrogate": ("def f(x):\n    return '\\ud800'", None, FAILED),
    "surrogate_in_an_exception": (
        "def f(x):\n    raise ValueError('\\udcff' * 500)",
        None,
        {Verdict.RUNTIME_ERROR},
    ),
    "non_utf8_on_stdout": (
        "import sys\ndef f(x):\n    sys.stdout.buffer.write(b'\\xff\\xfe\\x00')\n    return x + 1",
        None,
        {Verdict.PASSED},
    ),
    "nan": ("def f(x):\n    return float('nan')", None, FAILED),
    "inf": ("def f(x):\n    return float('inf')", ISCLOSE, FAILED),
    "nan_key": ("def f(x):\n    return {float('nan'): float('-inf')}", None, FAILED),
}

# name: (what the program writes at its first call to f, the verdicts it may get). The program
# otherwise returns the right values: what it wrote is all that can fail it. ``send`` writes a
# record as JSON (``json.dumps``), ``write`` any text or bytes, both framed as the harness does.
HASH_MOD = 2**61 - 1
WRITES = {
    "not_json": ("write(b'garbage')", FAILED),
    "not_utf8": ("write(b'\\xff\\xfe\\xfd')", FAILED),
    "not_an_object": ("send([1, 2])", FAILED),
    "unhashable_kind": ("send({'t': 'test', 'i': 0, 'kind': [1]})", FAILED),
    "dict_kind_load_error": ("send({'t': 'load_error', 'kind': {}, 'exc': 1})", FAILED),
    "float_index": ("send({'t': 'test', 'i': 0.0, 'values': [['int', '2']]})", FAILED),
    "nan_index": ("send({'t': 'test', 'i': float('nan')})", FAILED),
    "huge_json_int": ("write('{\"t\": \"test\", \"i\": ' + '9' * 5000 + '}')", FAILED),
    "huge_hex_int": ("send({'t': 'test', 'i': 0, 'values': [['int', 'f' * 1_000_000]]})", FAILED),
    "deep_json": (
        "write('{\"t\": \"test\", \"i\": 0, \"values\": ' + '[' * 1900 + ']' * 1900 + '}')",
        FAILED,
    ),
    "deeper_json": ("write('[' * 100_000 + ']' * 100_000)", FAILED),
    "colliding_keys": (
        f"send({{'t': 'test', 'i': 0, 'values': [['set', "
        f"[['int', format(1 + k * {HASH_MOD}, 'x')] for k in range(50_000)]]]}})",
        FAILED,
    ),
    "unhashable_set_member": (
        "send({'t': 'test', 'i': 0, 'values': [['set', [['list', []]]]]})",
        FAILED,
    ),
    "surrogate_exc": (
        "send({'t': 'test', 'i': 0, 'kind': 'runtime', 'exc': '\\ud800'})",
        {Verdict.RUNTIME_ERROR},
    ),
    "second_loaded": ("send({'t': 'loaded'})", FAILED),
    "early_end": ("send({'t': 'end'})", FAILED),
    "partial_header": ("os.write(3, b'\\x00\\x00')", {Verdict.FAILED, Verdict.OUTPUT_LIMIT}),
    "frame_over_the_cap": ("os.write(3, b'\\xff\\xff\\xff\\xff')", {Verdict.OUTPUT_LIMIT}),
    "more_than_the_pipe_cap": (
        "[write('x' * 2_000_000) for _ in range(9)]",
        {Verdict.FAILED, Verdict.OUTPUT_LIMIT},
    ),
    "closed_pipe": ("os.close(3)", {Verdict.RUNTIME_ERROR}),
}  # fmt: skip
