"""C and C++ programs on stdin/stdout: compiled once per job in the sandbox (the host's
compiler, from the view), then run on each test as a native process, judged as Python
programs are."""

from __future__ import annotations

import pytest

from common.types import ExecutionJob, StdioSpec, StdioTest, Validator, Verdict
from sandbox.trusted.languages import missing_compiler

TESTS = (
    StdioTest("sample/1", b"1 2\n", b"3\n", "sample"),
    StdioTest("secret/1", b"40 2\n", b"42\n"),
)
C_SUM = (
    "#include <stdio.h>\n"
    'int main(void) { long a, b; scanf("%ld %ld", &a, &b); printf("%ld\\n", a + b); }\n'
)
CPP_SUM = (
    "#include <iostream>\n"
    "int main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n"
)

pytestmark = pytest.mark.skipif(
    bool(missing_compiler("c") or missing_compiler("cpp")), reason="no C/C++ compiler here"
)


def judge(pool, code: str, language: str, stop: bool = False, **limits):
    job = ExecutionJob(code, (), stdio=StdioSpec(TESTS, **limits), language=language)
    return pool.run([job], stop_at_first_failure=stop)[0]


@pytest.mark.parametrize(("code", "language"), [(C_SUM, "c"), (CPP_SUM, "cpp")], ids=["c", "cpp"])
def test_right_native_programs_pass(pool, code, language):
    result = judge(pool, code, language)
    assert result.verdict is Verdict.PASSED, result.detail
    assert result.test_verdicts == [Verdict.PASSED] * 2


@pytest.mark.parametrize(
    ("code", "verdict", "detail"),
    [
        ("int main(void) { return 3; }", Verdict.RUNTIME_ERROR, "exit status 3"),
        (
            '#include <stdio.h>\nint main(void) { puts("3"); return 0; }',
            Verdict.FAILED,
            "wrong answer",
        ),
        ("int main(void) { int *p = 0; return *p; }", Verdict.RUNTIME_ERROR, "signal"),
        ("int main(void) { for (;;) {} }", Verdict.TIMEOUT, "time limit"),
        ("int main(void) { return }", Verdict.SYNTAX_ERROR, "compile error"),
    ],
    ids=["exit_3", "wrong", "segfault", "loop", "compile_error"],
)
def test_native_programs_get_the_verdict_they_earn(pool, code, verdict, detail):
    result = judge(pool, code, "c", stop=True, time_limit_s=0.5)
    assert result.verdict is verdict
    assert detail in result.detail


def test_a_native_program_that_tries_to_read_outside_its_view_fails(pool):
    """The binary runs under the same view, user and limits as Python programs: the host's
    /root and this checkout's tests are not there."""
    code = (
        "#include <stdio.h>\n"
        'int main(void) { FILE *f = fopen("/root/.bashrc", "r");'
        ' FILE *g = fopen("' + __file__ + '", "r");'
        ' printf("%d\\n", (f != 0) + (g != 0) + 3 - 3); return 0; }\n'
    )
    tests = (StdioTest("secret/1", b"", b"0\n"),)
    job = ExecutionJob(code, (), stdio=StdioSpec(tests), language="c")
    assert pool.run([job])[0].verdict is Verdict.PASSED


# Accepts an output within 1 of the answer (several right answers): Kattis' convention.
NEAR = """#include <stdio.h>
#include "near.h"
int main(int argc, char **argv) {
    long want, got; FILE *answer = fopen(argv[2], "r");
    if (argc < 4 || !answer || fscanf(answer, "%ld", &want) != 1) return 1;
    if (scanf("%ld", &got) != 1) return REJECT;
    return got - want <= 1 && want - got <= 1 ? ACCEPT : REJECT;
}
"""
NEAR_H = "#define ACCEPT 42\n#define REJECT 43\n"


def validated(pool, program: str, validator: str = NEAR):
    files = (("near.c", validator.encode()), ("near.h", NEAR_H.encode()))
    spec = StdioSpec(TESTS, validator=Validator("c", files, "near.c"))
    return pool.run([ExecutionJob(program, (), stdio=spec)])[0]


@pytest.mark.parametrize(
    ("offset", "verdict"), [(0, Verdict.PASSED), (1, Verdict.PASSED), (2, Verdict.FAILED)]
)
def test_the_problems_own_validator_decides(pool, offset, verdict):
    program = f"a, b = map(int, input().split())\nprint(a + b + {offset})"
    result = validated(pool, program)
    assert result.verdict is verdict, result.detail
    assert result.tests_passed == (2 if verdict is Verdict.PASSED else 0)


def test_a_validator_that_fails_is_the_judges_fault_not_the_programs(pool):
    """Masked (infra_error), never a wrong answer a policy would be taught by."""
    crashing = validated(pool, "print(3)", "int main(void) { return 1; }")
    assert crashing.verdict is Verdict.INFRA_ERROR
    assert "output validator failed on its own answer: exit status 1" in crashing.detail
    broken = validated(pool, "print(3)", "int main(void) { return }")
    assert broken.verdict is Verdict.INFRA_ERROR
    assert "validator did not compile" in broken.detail
    assert validated(pool, "raise SystemExit(5)").verdict is Verdict.RUNTIME_ERROR


def test_output_that_makes_the_validator_fail_is_a_wrong_answer_not_a_mask(pool):
    """The validator is run again on the test's answer: it accepts that, so the program's
    output broke it, which a policy must not learn to do for a masked sample."""
    fragile = NEAR.replace("return REJECT;", "abort();").replace(
        "<stdio.h>", "<stdio.h>\n#include <stdlib.h>"
    )
    result = validated(pool, "print('not a number')", fragile)
    assert result.verdict is Verdict.FAILED, result.detail
    assert "the output made the problem's validator fail" in result.detail
    assert validated(pool, "a, b = map(int, input().split())\nprint(a + b)", fragile).passed
