"""Writing the resolved config as TOML (``tomllib`` only reads), saved beside every run."""

from __future__ import annotations

import json
from typing import Any


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dump_toml(data: dict, prefix: str = "") -> str:
    scalars = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = []
    if scalars:
        out.append((f"[{prefix}]\n" if prefix else "") + "\n".join(scalars) + "\n")
    for key, value in data.items():
        if isinstance(value, dict):
            out.append(dump_toml(value, f"{prefix}.{key}" if prefix else key))
    return "\n".join(out)
