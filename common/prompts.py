"""From a problem to the prompt the model sees, and from its completion to the program run.

The templates (``chat``, ``plain``, ``auto``), :func:`build_program` and the rules by which
:func:`extract_code` picks the code out of an answer are told in docs/datasets.md (Prompt
templates, From completion to program).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import re
import textwrap

from common.types import Problem

PROMPT_TEMPLATES = ("auto", "chat", "plain")
_PYTHON_LANGS = ("python", "py", "python3")
_FENCE = re.compile(r"^[ \t]*```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.M)
_BARE_FENCE = re.compile(r"^[ \t]*```[ \t]*$", re.M)
_CODE_START = re.compile(r"^\s*(def |async def |class |import |from \S+ import |@\w)")
_MAX_PARSES = 200  # bounds the cost of extracting code from a long garbled completion

COMPLETE_FUNCTION = (
    "Complete the following Python function. Reply with the whole function, including the "
    "signature, in one ```python code block.\n\n```python\n{prefix}```"
)


class PromptError(ValueError):
    """A template that cannot be applied (e.g. ``chat`` for a tokenizer without one)."""


# ---- prompts ---------------------------------------------------------------------------------


def resolve_template(name: str, tokenizer) -> str:
    """``chat`` or ``plain`` for the configured name and this tokenizer."""
    if name not in PROMPT_TEMPLATES:
        raise PromptError(f"prompt template {name!r} is not one of {', '.join(PROMPT_TEMPLATES)}")
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if name == "auto":
        return "chat" if has_chat else "plain"
    if name == "chat" and not has_chat:
        raise PromptError(
            "prompt template 'chat' needs a tokenizer with a chat template; this one has none "
            "(use 'plain' or 'auto')"
        )
    return name


def render_prompt(problem: Problem, template: str, tokenizer=None) -> str:
    """The text the model sees for ``problem`` under ``template`` (``chat`` or ``plain``)."""
    task, prefix = problem.prompt, problem.program_prefix
    if template == "plain":
        if prefix:
            return task if task.endswith(prefix) else f"{task.rstrip()}\n\n{prefix}"
        return f"{task.rstrip()}\n\n```python\n"
    if template != "chat":
        raise PromptError(f"render_prompt needs 'chat' or 'plain', not {template!r}")
    if prefix:
        instructions = "" if task == prefix else task.rstrip() + "\n\n"
        message = instructions + COMPLETE_FUNCTION.format(prefix=prefix)
    else:
        message = task
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
    )


def render_problems(problems: list[Problem], template: str, tokenizer) -> list[Problem]:
    """Problems whose ``prompt`` is rendered for the model; ``template`` may be ``auto``."""
    resolved = resolve_template(template, tokenizer)
    return [dataclasses.replace(p, prompt=render_prompt(p, resolved, tokenizer)) for p in problems]


def special_strings(tokenizer) -> set[str]:
    """The strings a tokenizer reads as special tokens (``<|im_start|>``, ``<|endoftext|>``,
    added tokens): text from a program that holds one must never reach a prompt as is."""
    return {t for t in set(tokenizer.all_special_tokens) | set(tokenizer.get_added_vocab()) if t}


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of a rendered prompt; a chat template already wrote any BOS token itself."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])


# ---- code extraction -------------------------------------------------------------------------


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in a completion: the best fenced block if any, else the code in the raw text."""
    first = _FENCE.search(text)
    closing = _BARE_FENCE.search(text)
    if closing and (first is None or closing.start() <= first.start()):
        before = text[: closing.start()]
        if is_code(before):
            return before  # the prompt opened the fence and the model closed it
    blocks = _FENCE.findall(text)
    if blocks:
        return _choose_block(blocks, entry_point)
    return _code_span(text)


def _choose_block(blocks: list[tuple[str, str]], entry_point: str | None) -> str:
    if entry_point:
        defines = re.compile(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.M)
        defining = [body for _, body in blocks if defines.search(body)]
        parsing = [body for body in defining if _parses(body)]
        if parsing or defining:
            return (parsing or defining)[-1]
    for language, body in blocks:
        if language.lower() in _PYTHON_LANGS:
            return body
    return next((body for language, body in blocks if not language), blocks[0][1])


def _code_span(text: str) -> str:
    """The longest parsing run of lines starting at a code-looking line; else the text."""
    if _parses(text):
        return text
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _CODE_START.match(line)][:3]
    budget = _MAX_PARSES
    for start in starts:
        for end in _boundaries(lines, start):
            budget -= 1
            if budget < 0:
                return text
            snippet = textwrap.dedent("".join(lines[start:end]))
            if is_code(snippet):
                return snippet
    return text


def _boundaries(lines: list[str], start: int) -> list[int]:
    """Candidate ends of a code span, longest first: before blank or unindented lines."""
    ends = [len(lines)]
    for end in range(len(lines) - 1, start, -1):
        line = lines[end]
        if not line.strip() or not line[0].isspace():
            ends.append(end)
    return ends


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def is_code(code: str) -> bool:
    """Parses and is more than a bare name or constant (a word of prose parses too)."""
    if not code.strip():
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    trivial = (ast.Name, ast.Constant)
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, trivial)) for n in tree.body)


@functools.lru_cache(maxsize=4096)
def entry_point_from_tests(tests: tuple[str, ...]) -> str | None:
    """The first non-builtin function the tests call: the function the model must define."""
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and not hasattr(builtins, node.func.id)
            ):
                return node.func.id
    return None


def continues_prefix(problem: Problem) -> bool:
    """Whether the model's text continues ``program_prefix`` (the prompt ends with it)."""
    return bool(problem.program_prefix) and problem.prompt.endswith(problem.program_prefix)


def build_program(problem: Problem, completion_text: str) -> str:
    """The whole candidate program for ``problem`` written by ``completion_text``."""
    if continues_prefix(problem):
        fence = _BARE_FENCE.search(completion_text)
        code = completion_text[: fence.start()] if fence else completion_text
        return problem.program_prefix + code + problem.program_suffix
    code = extract_code(completion_text, entry_point_from_tests(problem.tests))
    if problem.program_prefix:
        code = problem.program_prefix.rstrip("\n") + "\n" + code
    return code + problem.program_suffix
