"""Importing a user-defined reward term (``function = "module:function"`` in ``[reward.terms]``).

Here, below the config, because the ``[reward]`` section imports every user function when the
config is loaded (a typo fails before any actor starts), and the algorithm imports it again
where it builds the reward (``algorithm.rewards.terms``): one loader, no import cycle.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any


class RewardTermError(ValueError):
    """A reward term that cannot be loaded, or that broke the contract; names the term."""


def load_user_term(
    name: str, path: str, options: Mapping[str, Any] | None = None
) -> Callable[[list], list[float | None]]:
    """Import ``module:function`` and check that it can be called as ``function(batch, **options)``.

    Checked when the config is loaded, so a typo fails before any actor starts, with the term's
    name and what is wrong.
    """
    options = dict(options or {})
    module_name, sep, attr = path.partition(":")
    if not (sep and module_name and attr):
        raise RewardTermError(
            f"reward term {name!r}: function {path!r} must look like 'module:function'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardTermError(
            f"reward term {name!r}: cannot import module {module_name!r} ({exc})"
        ) from None
    except Exception as exc:
        raise RewardTermError(
            f"reward term {name!r}: importing module {module_name!r} failed "
            f"({type(exc).__name__}: {exc})"
        ) from None
    function: Any = module
    for part in attr.split("."):
        if not hasattr(function, part):
            raise RewardTermError(
                f"reward term {name!r}: module {module_name!r} has no attribute {attr!r}"
            )
        function = getattr(function, part)
    if not callable(function):
        raise RewardTermError(f"reward term {name!r}: {path!r} is not callable")
    _check_signature(name, path, function, options)
    return functools.partial(function, **options) if options else function


def _check_signature(name: str, path: str, function: Callable, options: dict) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # some builtins and C callables have none to check
    try:
        signature.bind(None, **options)
    except TypeError as exc:
        keywords = "".join(f", {key}=..." for key in options)
        raise RewardTermError(
            f"reward term {name!r}: {path}{signature} cannot be called as f(batch{keywords}) "
            f"({exc}): a reward term takes one positional argument, the batch"
        ) from None
