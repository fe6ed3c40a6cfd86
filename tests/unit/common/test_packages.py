"""Kattis / ICPC problem packages: packages written here by each test (flags, order, limits,
what is skipped, what is refused), statement conversion, and the real packages in ../shared."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest
import yaml

from common.answer_flags import AnswerFlags
from common.datasets import DatasetError, load_dataset
from common.packages import (
    CUSTOM_VALIDATOR,
    PackageError,
    Skipped,
    html_to_text,
    load_packages,
    stdio_instruction,
    tex_to_text,
)
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT.parent / "shared" / "data"
KICKSTART = DATA / "codejam" / "kickstart"
KATTIS = DATA / "kattis-examples"


def _package(directory: Path, files: dict[str, str | bytes]) -> Path:
    """A package in ``directory``: a name, a statement and one secret test unless ``files``
    says otherwise (a value of None leaves that file out)."""
    defaults = {
        "problem.yaml": "name: Echo\n",
        "problem_statement/problem.md": "Print the input.",
        "data/secret/1.in": "1\n",
        "data/secret/1.ans": "1\n",
    }
    for name, content in (defaults | files).items():
        if content is None:
            continue
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return directory


def _one(directory: Path):
    problems, skipped = load_packages(directory)
    assert not skipped, skipped
    (problem,) = problems
    return problem


# ---- packages written by the tests ------------------------------------------------------------


def test_a_package_becomes_a_stdio_problem(tmp_path):
    _package(tmp_path / "echo", {"data/secret/1.in": b"a\x00b\n", "data/secret/1.ans": b"ab"})
    problem = _one(tmp_path / "echo")
    assert problem.problem_id == "echo"  # a single package: its directory's name
    assert problem.kind == "stdio" and problem.tests == ()
    assert problem.prompt == stdio_instruction("Echo", "Print the input.")
    assert "standard input" in problem.prompt and "Python 3" in problem.prompt
    (test,) = problem.stdio.tests
    assert (test.name, test.group, test.input, test.answer, test.flags) == (
        "secret/1",
        "secret",
        b"a\x00b\n",
        b"ab",
        "",
    )
    assert (problem.stdio.time_limit_s, problem.stdio.memory_mb, problem.stdio.output_mb) == (
        0.0,
        0,
        0,
    )


def test_flags_come_from_the_nearest_testdata_yaml(tmp_path):
    flags = "output_validator_flags: "
    _package(
        tmp_path,
        {
            "problem.yaml": "name: F\nvalidator_flags: case_sensitive\n",
            "data/testdata.yaml": flags + "float_tolerance 1e-3\n",
            "data/sample/1.in": "",
            "data/sample/1.ans": "",
            "data/secret/testdata.yaml": flags + "space_change_sensitive\n",
            "data/secret/g1/testdata.yaml": flags + "float_relative_tolerance 0.5\n",
            "data/secret/g1/1.in": "",
            "data/secret/g1/1.ans": "",
            "data/secret/g2/testdata.yaml": "range: 0 10\n",  # no flags: the parent's
            "data/secret/g2/1.in": "",
            "data/secret/g2/1.ans": "",
        },
    )
    got = {t.name: t.flags for t in _one(tmp_path).stdio.tests}
    assert got == {
        "sample/1": "float_tolerance 1e-3",
        "secret/1": "space_change_sensitive",
        "secret/g1/1": "float_relative_tolerance 0.5",
        "secret/g2/1": "space_change_sensitive",
    }


def test_problem_yaml_flags_apply_without_testdata_yaml(tmp_path):
    _package(tmp_path, {"problem.yaml": "name: F\nvalidator_flags: float_tolerance 1e-6\n"})
    assert [t.flags for t in _one(tmp_path).stdio.tests] == ["float_tolerance 1e-6"]


def test_samples_first_then_secret_groups_in_natural_order(tmp_path):
    files = {"data/secret/1.in": None, "data/secret/1.ans": None}
    for name in ("secret/10", "secret/2", "secret/01", "secret/1", "sample/b", "sample/a"):
        files |= {f"data/{name}.in": name, f"data/{name}.ans": "x"}
    for name in ("secret/group10/1", "secret/group9/3", "secret/group9/20"):
        files |= {f"data/{name}.in": name, f"data/{name}.ans": "x"}
    files |= {"data/secret/2.hint": "h", "data/secret/3.interaction": "i", "data/sample/c.png": ""}
    tests = _one(_package(tmp_path, files)).stdio.tests
    assert [t.name for t in tests] == [
        "sample/a",
        "sample/b",
        "secret/01",
        "secret/1",
        "secret/2",
        "secret/10",
        "secret/group9/3",
        "secret/group9/20",
        "secret/group10/1",
    ]
    assert [t.group for t in tests][-4:] == ["secret", *["secret/group9"] * 2, "secret/group10"]
    assert all(t.input == t.name.encode() for t in tests)


def test_limits_and_timelimit_file(tmp_path):
    limits = "limits:\n  time_limit: 2.5\n  memory: 256\n  output: 8\n"
    problem = _one(_package(tmp_path / "a", {"problem.yaml": "name: A\n" + limits}))
    spec = problem.stdio
    assert (spec.time_limit_s, spec.memory_mb, spec.output_mb) == (2.5, 256, 8)
    problem = _one(_package(tmp_path / "b", {".timelimit": "3\n"}))
    assert problem.stdio.time_limit_s == 3.0
    both = {"problem.yaml": "name: C\nlimits:\n  time_limit: 1\n", ".timelimit": "9"}
    assert _one(_package(tmp_path / "c", both)).stdio.time_limit_s == 1.0


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"problem.yaml": "name: I\ntype: interactive\n"}, "interactive"),
        ({"problem.yaml": "validation: custom interactive\n"}, "interactive"),
        ({"problem.yaml": "type: [scoring, interactive]\n"}, "interactive"),
        ({"problem.yaml": "type: multi-pass\n"}, "multi-pass"),
        ({"problem.yaml": "validation: custom\n"}, "without an output_validators/"),
        ({"output_validators/check.sh": "exit 42"}, CUSTOM_VALIDATOR),
        ({"output_validators/a/v.cc": "", "output_validators/b/v.cc": ""}, "several"),
        ({"problem_statement/problem.md": None}, "no statement"),
        ({"data/secret/1.in": None, "data/secret/1.ans": None}, "no tests"),
    ],
)
def test_what_cannot_be_judged_yet_is_skipped_with_a_reason(tmp_path, files, reason):
    _package(tmp_path / "p", files)
    problems, skipped = load_packages(tmp_path)
    assert problems == []
    assert len(skipped) == 1 and skipped[0].problem_id == "p"
    assert reason in skipped[0].reason


def test_scoring_problems_and_empty_validator_folders_are_loaded(tmp_path):
    _package(tmp_path, {"problem.yaml": "name: S\ntype: scoring\n"})
    (tmp_path / "output_validators").mkdir()
    assert _one(tmp_path).stdio.tests


@pytest.mark.parametrize(
    ("files", "bad_file", "message"),
    [
        ({"data/secret/2.in": "x"}, "data/secret/2.in", "no answer file 2.ans"),
        (
            {"data/secret/testdata.yaml": "output_validator_flags: float_tolerance -1\n"},
            "data/secret/testdata.yaml",
            "not a number >= 0",
        ),
        ({"problem.yaml": "name: F\nvalidator_flags: fuzzy\n"}, "problem.yaml", "'fuzzy'"),
        ({"problem.yaml": "name: F\nsource: a: b\n"}, "problem.yaml:2", "not valid YAML"),
        ({"data/testdata.yaml": "a: 1\n  b: 2\n"}, "data/testdata.yaml:2", "not valid YAML"),
        ({"problem.yaml": "limits:\n  memory: lots\n"}, "problem.yaml", "limits.memory"),
    ],
)
def test_a_broken_package_is_one_error_naming_the_file(tmp_path, files, bad_file, message):
    _package(tmp_path / "p", files)
    _package(tmp_path / "q", {})  # a good neighbour does not hide the error
    with pytest.raises(PackageError) as error:
        load_packages(tmp_path)
    assert f"{tmp_path / 'p' / bad_file}:" in str(error.value)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "flags",
    [
        "",
        "case_sensitive space_change_sensitive",
        "float_tolerance 1e-6",
        "float_absolute_tolerance .5 float_relative_tolerance 2.",
        "float_tolerance",
        "float_tolerance -1",
        "float_tolerance 1e999",
        "float_tolerance nan",
        "float_tolerance inf",
        "float_tolerance 1e",
        "float_tolerance 0x1p-3",
        "float_tolerance 0x1p99999",
        "float_tolerance 1_0",
        "fuzzy",
        "case_sensitive 3",
    ],
)
def test_a_package_loads_exactly_when_the_judge_takes_its_flags(tmp_path, flags):
    try:
        AnswerFlags.parse(flags)
        judge_accepts = True
    except ValueError:
        judge_accepts = False
    _package(tmp_path, {"problem.yaml": f"name: F\nvalidator_flags: {flags}\n"})
    try:
        load_packages(tmp_path)
        loads = True
    except PackageError:
        loads = False
    assert loads == judge_accepts


def test_names_ids_and_reference_solutions(tmp_path):
    _package(tmp_path / "b", {"problem.yaml": "name:\n  sv: Eko\n  en: Echo EN\n"})
    _package(tmp_path / "a" / "deep" / "c", {"problem.yaml": "name:\n  sv: Bara svenska\n"})
    accepted = "b/submissions/accepted/"
    for name, text in (("a_py2.py", "#!/usr/bin/env python2\nprint 1\n"), ("b.py", "print(1)\n")):
        (tmp_path / accepted).mkdir(parents=True, exist_ok=True)
        (tmp_path / accepted / name).write_text(text)
    problems, _ = load_packages(tmp_path)
    assert [p.problem_id for p in problems] == ["a/deep/c", "b"]
    assert "# Bara svenska\n" in problems[0].prompt and "# Echo EN\n" in problems[1].prompt
    assert (problems[0].reference_solution, problems[1].reference_solution) == ("", "print(1)\n")


def test_the_tex_statement_gives_the_name_when_problem_yaml_has_none(tmp_path):
    tex = "\\problemname{Hello}\nSay hello."
    files = {"problem.yaml": "", "problem_statement/problem.md": None}
    problem = _one(_package(tmp_path, files | {"problem_statement/problem.en.tex": tex}))
    assert problem.prompt == stdio_instruction("Hello", "Say hello.")


def test_statement_languages_and_formats_are_chosen_in_order(tmp_path):
    files = {
        "problem_statement/problem.md": None,
        "statement/problem.sv.md": "Svenska",
        "statement/problem.en.tex": "English \\emph{TeX}",
        "statement/problem.html": "<p>HTML</p>",
    }
    assert _one(_package(tmp_path, files)).prompt.endswith("\n\nHTML")


# ---- statements -------------------------------------------------------------------------------


def test_html_becomes_plain_text():
    html = """<html><head><title>T</title><style>p {color: red}</style></head><body>
    <script>var x = 1;</script><h3>Problem</h3>
    <p>  The wall has <b>N</b>
       sections; A<sub>i</sub> &le; 10<sup>9</sup> and $$$\\mathbf{K}$$$ &amp; more.<br/>Next line.
    </p><ul><li>one</li>
    <li>two</li></ul>
    <div class="sample-header">Sample Input
      <div onclick="copy()"><i class="material-icons">content_copy</i>Copied!</div></div>
    <pre>2
  1   2
3</pre><p>After &lt;pre&gt;.</p></body></html>"""
    assert html_to_text(html) == (
        "## Problem\n\n"
        "The wall has N sections; A_i ≤ 10^9 and $\\mathbf{K}$ & more.\nNext line.\n\n"
        "- one\n- two\n\n"
        "Sample Input\n\n"
        "```\n2\n  1   2\n3\n```\n\n"
        "After <pre>."
    )


def test_html_keeps_long_subscripts_and_display_math():
    assert html_to_text("<p>A<sub>i+1</sub> $$$$x$$$$</p>") == "A_{i+1} $$x$$"


def test_tex_becomes_plain_text():
    tex = r"""\problemname{Odd Echo}
% a comment
\illustration{0.3}{cave.jpg}{A cave}
Echo the words. 50\% of them.
\section*{Input}
The first line has \(N\) ($1 \le N \le 10$).
\begin{itemize}
  \item \emph{first}
  \item second
\end{itemize}
\section{Output}
Print ``yes''."""
    title, text = tex_to_text(tex)
    assert title == "Odd Echo"
    assert text == (
        "Echo the words. 50\\% of them.\n\n"
        "## Input\n\n"
        "The first line has \\(N\\) ($1 \\le N \\le 10$).\n\n"
        "- first\n- second\n\n"
        "## Output\n\n"
        'Print "yes".'
    )


# ---- the real packages in ../shared -----------------------------------------------------------


def test_every_kick_start_package_loads():
    problems, skipped = load_packages(KICKSTART)
    assert (len(problems), skipped) == (106, [])
    assert problems[0].problem_id == "2013/practice_round/bad_horse"
    assert [p.problem_id for p in problems] == sorted(p.problem_id for p in problems)
    tests = [t for p in problems for t in p.stdio.tests]
    assert len(tests) == 245  # the .in files; four .ans whose .in was too big are ignored
    assert all(p.stdio.tests and p.prompt.startswith("Write a complete") for p in problems)
    assert all(isinstance(t.input, bytes) and t.answer.startswith(b"Case #") for t in tests)
    for problem in problems:  # the flags are each problem.yaml's: mostly 1e-6, three others
        config = yaml.safe_load((KICKSTART / problem.problem_id / "problem.yaml").read_text())
        assert {t.flags for t in problem.stdio.tests} == {config["output_validator_flags"]}
    by_flags = Counter(p.stdio.tests[0].flags for p in problems)
    assert by_flags["float_tolerance 1e-6"] == 103
    assert Counter(t.group.split("/")[0] for t in tests) == {"sample": 36, "secret": 209}
    assert not any("$$$" in p.prompt or "content_copy" in p.prompt for p in problems)


def test_kick_start_statements_keep_their_samples():
    (problem,) = [p for p in load_packages(KICKSTART)[0] if p.problem_id.endswith("/flattening")]
    assert "# Flattening\n" in problem.prompt
    sample = problem.stdio.tests[0]
    assert sample.group == "sample"
    assert f"```\n{sample.input.decode().strip()}\n```" in problem.prompt
    assert "A_{i+1}" in problem.prompt


def test_kattis_examples():
    problems, skipped = load_packages(KATTIS)
    assert [p.problem_id for p in problems] == ["different", "hello", "oddecho"]
    assert skipped == [Skipped("guess", "interactive (a judge talks to the program)")]
    different, hello, oddecho = problems
    validator = different.stdio.validator
    assert (validator.language, validator.main) == ("cpp", "validate.cc")
    assert sorted(name for name, _ in validator.files) == ["validate.cc", "validate.h"]
    assert hello.stdio.validator is None
    assert [(t.name, t.input, t.answer) for t in hello.stdio.tests] == [
        ("secret/hello", b"", b"Hello World!\n")
    ]
    assert hello.stdio.memory_mb == 512 and "print('Hello World!')" in hello.reference_solution
    assert "# Hello World!\n" in hello.prompt and "## Output" in hello.prompt
    names = [t.name for t in oddecho.stdio.tests]
    assert names[:3] == ["sample/1", "sample/2", "secret/subtask1/1"]
    assert names[5:8] == ["secret/subtask2/01", "secret/subtask2/1", "secret/subtask2/02"]
    assert len(names) == 18 and "# Odd Echo\n" in oddecho.prompt


def test_load_packages_of_one_package_directory():
    problems, skipped = load_packages(KATTIS / "hello")
    assert ([p.problem_id for p in problems], skipped) == (["hello"], [])


def test_load_dataset_reads_a_directory_of_packages(caplog):
    assert load_dataset(KICKSTART) == load_packages(KICKSTART)[0]
    assert load_dataset(KICKSTART, split="test", limit=3) == load_packages(KICKSTART)[0][:3]
    with caplog.at_level(logging.INFO, logger="common.datasets"):
        ids = [p.problem_id for p in load_dataset(KATTIS, split="all")]
        assert ids == ["different", "hello", "oddecho"]
    assert "skipped 1 problem package(s)" in caplog.text and "guess: interactive" in caplog.text
    with pytest.raises(DatasetError, match="problem packages have no splits"):
        load_dataset(KICKSTART, split="train")


def test_a_directory_without_packages_is_an_error(tmp_path):
    with pytest.raises(DatasetError, match="no problem packages"):
        load_dataset(tmp_path)


def test_a_data_file_holding_a_relative_path_is_the_file_it_names(tmp_path):
    """A symbolic link checked out as text (git with links off; oddecho's subtask2 links
    subtask1's tests): read as its target, never outside the package's data."""
    _package(
        tmp_path,
        {
            "data/secret/a/1.in": "5\n",
            "data/secret/a/1.ans": "6\n",
            "data/secret/b/1.in": "../a/1.in",
            "data/secret/b/1.ans": "../a/1.ans\n",
            "data/secret/b/2.in": "../../../problem.yaml",
            "data/secret/b/2.ans": "../../../problem.yaml",
        },
    )
    (problem,), _ = load_packages(tmp_path)
    by_name = {t.name: t for t in problem.stdio.tests}
    assert (by_name["secret/b/1"].input, by_name["secret/b/1"].answer) == (b"5\n", b"6\n")
    assert by_name["secret/b/2"].input == b"../../../problem.yaml"  # outside data/: as written
    oddecho = load_dataset(KATTIS / "oddecho")[0]
    linked = {t.name: t for t in oddecho.stdio.tests}
    assert linked["secret/subtask2/1"].input == linked["secret/subtask1/1"].input
    assert not any(t.input.startswith(b"../") for t in oddecho.stdio.tests)


def test_a_custom_validator_takes_the_validator_flags_as_its_own_arguments(tmp_path):
    files = {
        "problem.yaml": "validation: custom\nvalidator_flags: --margin 2\n",
        "output_validators/v/check.c": "int main(void) { return 42; }",
        "output_validators/v/util.h": "",
    }
    _package(tmp_path, files)
    (problem,), _ = load_packages(tmp_path)
    validator = problem.stdio.validator
    assert (validator.language, validator.main, validator.flags) == ("c", "check.c", "--margin 2")
    assert {test.flags for test in problem.stdio.tests} == {""}  # not the default's flags
    (tmp_path / "data" / "secret" / "testdata.yaml").write_text("output_validator_flags: -x 3\n")
    (problem,), _ = load_packages(tmp_path)  # a group's arguments to its own validator
    assert {test.flags for test in problem.stdio.tests} == {"-x 3"}


def test_a_groups_jobs_carry_their_problems_tests_once():
    """A group's G jobs share their problem's ``StdioSpec`` object, which one call to the pool
    actor serialises once (pickle's memo): the tests do not travel with every sample."""
    from ray import cloudpickle

    problem = max(load_packages(KICKSTART)[0], key=lambda p: len(p.stdio.tests[-1].input))
    one = len(cloudpickle.dumps([problem.job("print(0)")]))
    group = len(cloudpickle.dumps([problem.job(f"print({i})") for i in range(8)]))
    assert group - one < 7 * 200  # seven more short programs, not seven more copies of the tests
    assert one > 10 * 7 * 200


def test_a_python_validator_is_loaded_with_its_helpers(tmp_path):
    files = {
        "output_validators/v/util.py": "TOL = 1\n",
        "output_validators/v/check.py": "if __name__ == '__main__':\n    pass\n",
    }
    _package(tmp_path, files)
    (problem,), _ = load_packages(tmp_path)
    validator = problem.stdio.validator
    assert (validator.language, validator.main) == ("python", "check.py")
    assert [name for name, _ in validator.files] == ["check.py", "util.py"]
