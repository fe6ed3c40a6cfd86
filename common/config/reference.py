"""The configuration reference (docs/configuration.md), generated from the pydantic schema.

Every table row is read from :class:`common.config.Config`: the key, its type and bounds, its
default and the field's ``description``, so a renamed key, a new default or a new field shows up
the next time the reference is generated, and ``tests/unit/common/config/test_reference.py``
fails while the committed file is stale. Regenerate with::

    python -m common.config.reference > docs/configuration.md

Each field's ``description`` is its whole entry: what it does, its unit, and why its default
is what it is; measurements stay in docs/benchmarks.md, which a description links.
"""

from __future__ import annotations

import importlib
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from common.config import Config

REGENERATE = "python -m common.config.reference > docs/configuration.md"

INTRO = f"""\
<!-- Generated from the pydantic schema (common/config/) by common/config/reference.py:
     do not edit by hand; regenerate with `{REGENERATE}`. -->

# Configuration reference

A run is configured by one TOML file (`python -m launch.train --config FILE`) plus overrides on
the command line: every key below can be given as `--section.key value`, e.g.
`--rollout.batch_size 256`; lists and tables are JSON (`--rollout.stop '["\\n"]'`,
`--reward.terms.scorer.weight 0.2`). Keys left out take the defaults below.

Each TOML section is a pydantic model that refuses unknown keys; the whole configuration is
validated before any actor starts, and a refusal names the field and the reason:

```
error: invalid configuration:
  rollout: batch_size (12) must be a multiple of group_size (8): advantages are normalised per group
```

The resolved configuration is saved as `<run>/config.toml` with every run (rerun it with
`--config runs/NAME/config.toml`). Units are in the key's name (`_s` seconds, `_mb`/`_mib`
megabytes/mebibytes, `_gib` gibibytes, `_tokens` tokens); "steps" are training steps unless a
key says optimiser steps. The shipped configs in `configs/` set only what differs from these
defaults.
"""

# Where a section's subject is explained at length.
SECTION_LINKS = {
    "data": "formats, splits, templates and curricula: [datasets.md](datasets.md)",
    "eval": "pass@k during and after training: [datasets.md](datasets.md#evaluation)",
    "episode": "multi-turn episodes: [episodes.md](episodes.md)",
    "selfplay": "the saboteur and self-play rounds: [selfplay.md](selfplay.md)",
    "sandbox": "isolation, test forms and measurements: [sandbox.md](sandbox.md)",
    "reward": "the term contract and the built-in terms: [rewards.md](rewards.md)",
    "algorithm": "GRPO and each variant with its paper, told once in the docstring of "
    "`algorithm/__init__.py`; effects on the demo: "
    "[benchmarks.md](benchmarks.md#optimisation-options-on-the-demo)",
    "algorithm.advantage": "baselines: [rewards.md](rewards.md#baselines); code: "
    "`algorithm/advantage/`",
    "algorithm.loss": "code: `algorithm/loss.py`, beta's controller `algorithm/kl_control.py`",
    "learner.lora": "the LoRA demo: [benchmarks.md](benchmarks.md#lora-demo)",
    "async": "the pipeline: [training.md](training.md#asynchronous-mode)",
    "weights": "transports: [cluster.md](cluster.md#weight-transports)",
    "ray": "the cluster and its ports: [cluster.md](cluster.md), [network.md](network.md)",
}


def main() -> None:
    """Print the reference; ``> docs/configuration.md`` commits it."""
    print(render(), end="")


def render() -> str:
    """The whole reference: the intro, one table per TOML section."""
    parts = [INTRO]
    for section, model in sections():
        parts.append(_render_section(section, model))
    return "\n".join(parts)


def sections() -> Iterator[tuple[str, type[BaseModel]]]:
    """Every TOML table of the schema, nested ones right after their parent, by dotted name."""
    return _tables("", Config)


def field_paths() -> set[str]:
    """Every documented key, dotted (``learner.lora.rank``, ``reward.terms.<name>.weight``)."""
    return {f"{section}.{key}" for section, model in sections() for key, _ in leaf_fields(model)}


def _tables(prefix: str, model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel]]]:
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        if _is_model(info.annotation):
            yield key, info.annotation
            yield from _tables(f"{key}.", info.annotation)
        elif _is_term_table(info.annotation):
            yield f"{key}.<name>", typing.get_args(info.annotation)[1]
            yield from _term_options(key)


def _term_options(key: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """The built-in reward terms' options: validated by the reward section from its ``OPTIONS``
    table, not typed in the schema, so read from the module that defines that section,
    wherever it lives."""
    reward = Config.model_fields["reward"].annotation
    for kind, model in importlib.import_module(reward.__module__).OPTIONS.items():
        if model.model_fields:
            yield f"{key}.{kind}.options", model


def leaf_fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    """The keys of one table, without the tables nested in it."""
    for name, info in model.model_fields.items():
        if not _is_model(info.annotation) and not _is_term_table(info.annotation):
            yield info.alias or name, info


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_term_table(annotation: Any) -> bool:
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) is dict and len(args) == 2 and _is_model(args[1])


def _render_section(section: str, model: type[BaseModel]) -> str:
    lines = [f"## [{section}]", ""]
    if section == "reward":
        lines += [_REWARD_TERMS, ""]
    if section in SECTION_LINKS:
        lines += [f"See also {SECTION_LINKS[section]}.", ""]
    fields = list(leaf_fields(model))
    if not fields:
        return "\n".join(lines)
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, info in fields:
        cells = [f"`{section}.{key}`", _type(info), _default(info), _cell(info.description or "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_REWARD_TERMS = (
    "`reward.terms` is a table of named terms, `{execution = {weight = 1.0}}` by default (the "
    "execution reward alone). Listing terms replaces the default; each is a "
    "`[reward.terms.<name>]` table, below, and a built-in's options are "
    "`[reward.terms.<kind>.options]`, after it."
)


def _type(info: FieldInfo) -> str:
    bounds = [_bound(item) for item in info.metadata]
    text = " ".join([_type_name(info.annotation), ", ".join(b for b in bounds if b)]).strip()
    return _cell(f"`{text}`")


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f'"{arg}"' for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is tuple:
        return "[" + ", ".join(_type_name(arg) for arg in args) + "]"
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _bound(item: Any) -> str:
    for kind, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        if isinstance(item, getattr(annotated_types, kind.capitalize())):
            return f"{symbol} {_value(getattr(item, kind))}"
    return ""


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return f"`{_value(info.default_factory())}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{_value(info.default)}`"


def _value(value: Any) -> str:
    """A default as it is written in TOML."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and 0 < abs(value) < 1e-2:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"  # 1e-4, not 0.0001
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _cell(text: str) -> str:
    """Markdown table cell: pipes escaped, angle brackets outside code shown, not parsed as
    HTML (``<run>/rollouts/`` would vanish)."""
    pieces = re.split(r"(`[^`]*`)", text.replace("|", "\\|"))
    return "".join(
        piece if piece.startswith("`") else piece.replace("<", "&lt;").replace(">", "&gt;")
        for piece in pieces
    )


if __name__ == "__main__":
    main()
