"""Prompt templates and code extraction (``common/prompts.py``): fenced, unfenced, multiple-block
and chatty answers, and the program a completion makes."""

from __future__ import annotations

import pytest

from common.datasets import mbpp_instruction
from common.prompts import (
    PromptError,
    build_program,
    encode_prompt,
    entry_point_from_tests,
    extract_code,
    render_problems,
    render_prompt,
    resolve_template,
)
from common.types import Problem
from launch.data.tasks import synthetic_problem

SOLUTION = "def add_one(x):\n    return x + 1\n"


def test_fenced_block_is_extracted():
    assert extract_code(f"```python\n{SOLUTION}```") == SOLUTION


def test_unfenced_code_is_returned_as_is():
    assert extract_code(SOLUTION) == SOLUTION


def test_chatter_around_unfenced_code_is_dropped():
    text = (
        "Here is the solution:\n def add_one(x):\n     return x + 1\n\n"
        "This function adds one to its argument.\nIt runs in O(1)."
    )
    assert extract_code(text).strip() == SOLUTION.strip()


def test_chatter_around_a_fenced_block_is_dropped():
    text = f"Sure! Here you go:\n\n```python\n{SOLUTION}```\n\nThe function returns x + 1."
    assert extract_code(text) == SOLUTION


def test_multiple_blocks_prefer_the_one_defining_the_tested_function():
    text = (
        "Usage first:\n```python\nprint(add_one(1))\n```\nThe helper:\n```python\n"
        "def helper():\n    pass\n```\nThe answer:\n```python\n" + SOLUTION + "```\n"
    )
    assert extract_code(text, "add_one") == SOLUTION


def test_a_revised_definition_wins_over_a_draft():
    draft = "def add_one(x):\n    return x\n"
    text = f"Draft:\n```python\n{draft}```\nFixed:\n```python\n{SOLUTION}```"
    assert extract_code(text, "add_one") == SOLUTION


def test_without_a_defining_block_the_first_python_block_wins():
    text = f"```text\nnot code\n```\n```python\n{SOLUTION}```\n```python\nprint(1)\n```"
    assert extract_code(text, "missing_name") == SOLUTION


def test_unterminated_fence_from_a_truncated_completion():
    assert extract_code("```python\n" + SOLUTION + "    # more") == SOLUTION + "    # more"


def test_fence_opened_by_the_prompt_is_closed_by_the_completion():
    # the plain template ends with an opened fence: the model writes code, then closes it
    text = SOLUTION + "```\n\nExample:\n```python\nprint(add_one(2))\n```\n"
    assert extract_code(text, "add_one") == SOLUTION


def test_entry_point_from_tests_skips_builtins():
    tests = ("assert len(set(add_one(1))) == 2", "assert add_one(2) == 3")
    assert entry_point_from_tests(tests) == "add_one"
    assert entry_point_from_tests(("assert True",)) is None


class FakeChatTokenizer:
    chat_template = "fake"
    bos_token = None

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<asst>"


class PlainTokenizer:
    chat_template = None


MBPP = Problem(
    "601", mbpp_instruction("Add one.", ["assert add_one(1) == 2"]), ("assert add_one(1) == 2",)
)
HEADER = 'def add_one(x):\n    """Add one."""\n'
HUMANEVAL = Problem("HumanEval/9", HEADER, ("assert add_one(1) == 2",), program_prefix=HEADER)


def test_auto_picks_chat_when_the_tokenizer_has_a_template():
    assert resolve_template("auto", FakeChatTokenizer()) == "chat"
    assert resolve_template("auto", PlainTokenizer()) == "plain"
    with pytest.raises(PromptError, match="needs a tokenizer with a chat template"):
        resolve_template("chat", PlainTokenizer())
    with pytest.raises(PromptError, match="not one of auto, chat, plain"):
        resolve_template("fancy", PlainTokenizer())


def test_mbpp_chat_prompt_is_one_user_message_with_the_tests():
    prompt = render_prompt(MBPP, "chat", FakeChatTokenizer())
    assert prompt == f"<user>{MBPP.prompt}</user><asst>"
    assert "Your code should pass these tests:\n\nassert add_one(1) == 2" in prompt


def test_mbpp_plain_prompt_opens_a_python_fence():
    assert render_prompt(MBPP, "plain") == MBPP.prompt + "\n\n```python\n"


def test_humaneval_plain_prompt_is_continued_verbatim():
    (rendered,) = render_problems([HUMANEVAL], "plain", PlainTokenizer())
    assert rendered.prompt == HEADER
    assert build_program(rendered, "    return x + 1\n") == HEADER + "    return x + 1\n"


def test_humaneval_chat_prompt_asks_for_the_whole_function():
    (rendered,) = render_problems([HUMANEVAL], "auto", FakeChatTokenizer())
    assert "Reply with the whole function" in rendered.prompt and HEADER in rendered.prompt
    answer = f"Sure:\n```python\n{SOLUTION}```\nIt adds one."
    program = build_program(rendered, answer)
    assert program == HEADER + SOLUTION  # the stub stays, the answer redefines it
    namespace: dict = {}
    exec(program, namespace)  # trusted code written by this test
    assert namespace["add_one"](1) == 2


def test_mbpp_chat_program_is_the_extracted_code():
    (rendered,) = render_problems([MBPP], "chat", FakeChatTokenizer())
    answer = f"Here is the solution:\n```python\n{SOLUTION}```\nHope it helps!"
    assert build_program(rendered, answer) == SOLUTION


def test_real_chat_template_of_the_tiny_tokenizer():
    from launch.data.tiny_model import build_tokenizer

    tokenizer = build_tokenizer()
    (rendered,) = render_problems([MBPP], "auto", tokenizer)
    assert rendered.prompt == f"<|im_start|>user\n{MBPP.prompt}<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(encode_prompt(tokenizer, rendered.prompt)) == rendered.prompt


def test_extract_code_prefers_the_python_fence():
    text = "Sure!\n```text\nnot code\n```\nHere:\n```python\ndef f():\n    return 1\n```\nBye"
    assert extract_code(text) == "def f():\n    return 1\n"


def test_extract_code_returns_raw_text_without_fences():
    assert extract_code("def f(): return 2") == "def f(): return 2"


def test_completion_style_program_continues_the_header():
    problem = synthetic_problem(4)
    assert build_program(problem, "4\n") == problem.prompt + "4\n"
