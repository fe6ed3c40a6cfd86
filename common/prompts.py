"""From a completion's text to the program the sandbox runs.

Models wrap code in chatter and Markdown fences; completion-style tasks continue a function
header. ``extract_code`` takes the fenced block when there is one (the first ``python`` block,
else the first block of any language) and the raw text otherwise; ``build_program`` prepends
the problem's ``program_prefix``.
"""

from __future__ import annotations

import re

from common.types import Problem

_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str) -> str:
    """The code in a completion: a fenced block if any (Python preferred), else the text."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return text
    for language, body in blocks:
        if language.lower() in ("python", "py", "python3"):
            return body
    return blocks[0][1]


def build_program(problem: Problem, completion_text: str) -> str:
    """The whole candidate program for ``problem`` written by ``completion_text``."""
    code = completion_text if problem.program_prefix else extract_code(completion_text)
    return problem.program_prefix + code
