"""Reading configs: TOML files, ``--section.key value`` overrides, and errors that name the field
(and, for a key that moved, where it is now)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from common.config.algorithm import LossConfig
from common.config.base import ConfigError
from common.config.root import Config


def parse_value(raw: str) -> Any:
    """A command-line value: JSON when it parses (numbers, bools, lists), else a string."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--section.key value`` pairs (already split into a flat list) onto a config dict."""
    if len(overrides) % 2:
        raise ConfigError(f"override {overrides[-1]!r} has no value: use --section.key VALUE")
    for flag, raw in zip(overrides[::2], overrides[1::2], strict=True):
        if not flag.startswith("--") or "." not in flag:
            raise ConfigError(f"override {flag!r} must look like --section.key VALUE")
        *sections, key = flag[2:].split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ConfigError(
                    f"override {flag!r}: {section!r} is not a section (the config sets it to "
                    f"{node!r})"
                )
        node[key] = parse_value(raw)
    return data


def _format_error(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            moved = moved_key(where)
            message = (
                f"unknown key; it is {moved} now"
                if moved
                else "unknown key (check the spelling against docs/configuration.md)"
            )
        lines.append(f"  {where}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def moved_key(where: str) -> str | None:
    """Where a key of the math now lives (``[algorithm.loss]``, ``[algorithm.advantage]``) when
    ``where`` is its old place in ``[learner]`` or ``[advantage]``; None otherwise. For the error
    message only: old keys are refused, never read."""
    section, _, key = where.partition(".")
    if section == "learner" and key in LossConfig.model_fields:
        return f"algorithm.loss.{key}"
    if section == "advantage":
        return f"algorithm.{where}"
    return None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a TOML file (or the defaults), apply overrides and validate everything."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory; give the TOML file in it")
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            raw = path.read_bytes()
            data = tomllib.loads(raw.decode("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise ConfigError(f"{path}:{line}: not UTF-8 text, which TOML must be") from None
        except OSError as exc:
            raise ConfigError(f"config file {path}: cannot read it: {exc.strerror}") from None
    return validate_config(apply_overrides(data, overrides or []))


def validate_config(data: dict) -> Config:
    """A config dict (file plus overrides) as a validated Config."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None
