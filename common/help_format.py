"""The ``--help`` layout shared by the commands (``python -m launch.<tool>``, ``bench.learner``):
every option shows its default, so a reader never has to guess which value an omitted option
takes; descriptions keep their line breaks (usage examples in module docstrings).
"""

from __future__ import annotations

import argparse
import copy


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``RawDescriptionHelpFormatter`` that appends ``(default: X)`` to an option's help."""

    def add_argument(self, action: argparse.Action) -> None:
        # argparse lists an option without help text bare; one with a default still gets a line
        if action.help is None and _shows_default(action):
            action = copy.copy(action)
            action.help = "default: %(default)s"
        super().add_argument(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not _shows_default(action) or "default" in text:
            return action.help
        return f"{text} (default: %(default)s)"


def _shows_default(action: argparse.Action) -> bool:
    """An option with a default value worth showing (not a positional, a flag or None)."""
    default = action.default
    # `is`, not `in`: 0 == False
    unset = default is None or default is False or default is argparse.SUPPRESS
    return bool(action.option_strings) and not unset
