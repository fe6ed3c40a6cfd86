"""Kattis / ICPC problem packages (problemtools, BAPCtools, DOMjudge) as stdin/stdout problems.

Each package directory (``problem.yaml``, a statement, ``data/{sample,secret}/**/X.in`` with
``X.ans``) becomes a :class:`Problem` whose ``stdio`` holds every test, samples first, with the
problem's limits, the default output validator's flags or its own validator. What cannot be
judged yet (interactive and multi-pass problems, validators in other languages) is skipped with
a reason; a wrong package is a :class:`PackageError` naming the file. The layout, flags and
validators: docs/datasets.md, "Problem packages (stdin/stdout)".
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import yaml

from common.answer_flags import AnswerFlags
from common.types import Problem, StdioSpec, StdioTest, Validator


class PackageError(ValueError):
    """A malformed package; the message names the file (and line). ``common.datasets`` reports
    it as its ``PackageError``."""


@dataclass(frozen=True)
class Skipped:
    """A package left out, and why (a kind of problem the sandbox does not judge yet)."""

    problem_id: str
    reason: str


STDIO_INSTRUCTION = (
    "Write a complete Python 3 program that solves the problem below. The program reads the "
    "input from standard input and writes the answer to standard output.\n\n# {name}\n\n"
    "{statement}"
)
STATEMENTS = ("problem.en.md", "problem.md", "problem.en.html", "problem.html")
STATEMENTS += ("problem.en.tex", "problem.tex")
CUSTOM_VALIDATOR = "custom output validator not judged"


def stdio_instruction(name: str, statement: str) -> str:
    """The task text of a whole-program problem: the model must write a program, not a
    function, since the tests are files fed to it on stdin."""
    return STDIO_INSTRUCTION.format(name=name.strip(), statement=statement.strip())


def load_packages(root: str | Path) -> tuple[list[Problem], list[Skipped]]:
    """Every package at or below ``root``, by ``problem_id`` (the path below ``root``; a
    single package's directory name), with those that cannot be judged yet set apart."""
    root = Path(root)
    if (root / "problem.yaml").is_file():
        found = [(root, root.resolve().name)]
    else:
        found = [(d, d.relative_to(root).as_posix()) for d in _package_dirs(root)]
    if not found:
        raise PackageError(f"{root}: no problem packages (directories with a problem.yaml)")
    problems, skipped = [], []
    for directory, problem_id in sorted(found, key=lambda pair: pair[1]):
        loaded = load_package(directory, problem_id)
        (problems if isinstance(loaded, Problem) else skipped).append(loaded)
    return problems, skipped


def _package_dirs(root: Path) -> list[Path]:
    packages = []
    for top, dirs, files in os.walk(root):
        if "problem.yaml" in files:
            packages.append(Path(top))
            dirs.clear()  # a package's folders hold no packages: data and submissions not walked
    return packages


def load_package(directory: Path, problem_id: str) -> Problem | Skipped:
    """One package as a problem, or why it is skipped."""
    config = _read_yaml(directory / "problem.yaml")
    reason = _skip_reason(config, directory)
    if reason is not None:
        return Skipped(problem_id, reason)
    statement = _statement(directory)
    if statement is None:
        names = " or ".join(STATEMENTS)
        return Skipped(problem_id, f"no statement ({names} in problem_statement/ or statement/)")
    title, text = statement
    validator = _validator(config, directory)
    if isinstance(validator, str):
        return Skipped(problem_id, validator)
    # validator_flags are a custom validator's own arguments, not the default one's flags
    flags = "" if validator else _flags(config, directory / "problem.yaml", "")
    tests = _tests(directory / "data", flags, custom=validator is not None)
    if not tests:
        return Skipped(problem_id, "no tests (data/sample/*.in or data/secret/**/*.in)")
    return Problem(
        problem_id=problem_id,
        prompt=stdio_instruction(_name(config, title, directory), text),
        tests=(),
        reference_solution=_reference_solution(directory),
        stdio=StdioSpec(tests, *_limits(config, directory), validator=validator),
    )


def _read_yaml(path: Path) -> dict:
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise PackageError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise PackageError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PackageError(f"{path}: expected a mapping of keys to values")
    return value


def _skip_reason(config: dict, directory: Path) -> str | None:
    """Why the package cannot be judged as a pass/fail stdio problem yet, or None.

    ``scoring`` problems are loaded and judged pass/fail: a program passing every test earns
    full marks, which is what the reward asks for."""
    kinds = config.get("type", "pass-fail")
    kinds = set(kinds if isinstance(kinds, list) else str(kinds).split())
    validation = str(config.get("validation", "default")).split()
    if "interactive" in kinds or "interactive" in validation:
        return "interactive (a judge talks to the program)"
    if "multi-pass" in kinds:
        return "multi-pass (the program runs several times)"
    unknown = kinds - {"pass-fail", "scoring"}
    if unknown:
        raise PackageError(f"{directory / 'problem.yaml'}: unknown type {', '.join(unknown)}")
    return None


_VALIDATOR_SOURCES = {"cpp": (".cc", ".cpp", ".cxx"), "c": (".c",), "python": (".py",)}


def _validator(config: dict, directory: Path) -> Validator | str | None:
    """The package's own output validator: a C, C++ or Python program in
    ``output_validators/<name>/`` (or its files right there; 2023-07: ``output_validator/``),
    its flags ``validator_flags``; a string says why it cannot be judged; None: the default."""
    validation = str(config.get("validation", "default")).split()
    roots = [directory / "output_validators", directory / "output_validator"]
    roots = [d for d in roots if d.is_dir() and any(d.iterdir())]
    if "custom" not in validation and not roots:
        return None
    if not roots:
        return "custom output validation without an output_validators/ directory"
    programs = sorted(d for d in roots[0].iterdir() if d.is_dir()) or [roots[0]]
    if len(programs) > 1:
        return "several output validators"
    files = sorted(f for f in programs[0].iterdir() if f.is_file())
    suffixes = {f.suffix for f in files}
    language = next((k for k, exts in _VALIDATOR_SOURCES.items() if suffixes & set(exts)), "")
    if not language:
        return f"{CUSTOM_VALIDATOR}: C, C++ and Python are ({', '.join(sorted(suffixes))})"
    sources = [f for f in files if f.suffix in _VALIDATOR_SOURCES[language]]
    marker = b"__main__" if language == "python" else b"main("
    main = next((f for f in sources if marker in f.read_bytes()), sources[0])
    flags = config.get("validator_flags") or ""
    flags = " ".join(map(str, flags)) if isinstance(flags, list) else str(flags)
    return Validator(language, tuple((f.name, f.read_bytes()) for f in files), main.name, flags)


def _name(config: dict, title: str, directory: Path) -> str:
    name = config.get("name")
    if isinstance(name, dict) and name:
        name = name.get("en", next(iter(name.values())))
    return str(name) if name else title or directory.resolve().name


def _limits(config: dict, directory: Path) -> tuple[float, int, int]:
    """``time_limit_s, memory_mb, output_mb``; 0 where the package sets none (the sandbox's
    defaults then apply). problemtools writes the time limit it derived to ``.timelimit``."""
    where = directory / "problem.yaml"
    limits = config.get("limits") or {}
    if not isinstance(limits, dict):
        raise PackageError(f"{where}: limits must be a mapping")
    timelimit = directory / ".timelimit"
    if "time_limit" in limits or not timelimit.is_file():
        time_limit = _number(limits.get("time_limit", 0), float, f"{where}: limits.time_limit")
    else:
        time_limit = _number(timelimit.read_text().strip(), float, str(timelimit))
    memory = _number(limits.get("memory", 0), int, f"{where}: limits.memory")
    output = _number(limits.get("output", 0), int, f"{where}: limits.output")
    return time_limit, memory, output


def _number(value: object, kind: type, where: str) -> float | int:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise PackageError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise PackageError(f"{where}: {value!r} must be a number >= 0")
    return number


def _flags(config: dict, where: Path, inherited: str, custom: bool = False) -> str:
    """The output validator's flags ``config`` sets (problem.yaml: ``validator_flags``, or
    ``output_validator_flags`` as Kick Start's; testdata.yaml: the latter), else ``inherited``.
    Checked as the default validator's unless ``custom``: then they are the problem's own
    validator's arguments, its business."""
    key = next((k for k in ("output_validator_flags", "validator_flags") if k in config), None)
    if key is None:
        return inherited
    value = config[key]
    flags = " ".join(map(str, value)) if isinstance(value, list) else str(value or "")
    try:
        if not custom:
            AnswerFlags.parse(flags)
    except ValueError as exc:
        raise PackageError(f"{where}: {key}: {exc}") from None
    return flags


def _tests(data: Path, flags: str, custom: bool = False) -> tuple[StdioTest, ...]:
    """``data/sample`` then ``data/secret``; ``data/testdata.yaml`` applies to both."""
    flags = _nearest_flags(data, flags, custom)
    tests: list[StdioTest] = []
    for group in ("sample", "secret"):
        if (data / group).is_dir():
            tests += _group_tests(data / group, data, flags, custom)
    return tuple(tests)


def _nearest_flags(directory: Path, inherited: str, custom: bool) -> str:
    """The flags of ``directory``'s own ``testdata.yaml``, else those it inherits."""
    where = directory / "testdata.yaml"
    return _flags(_read_yaml(where), where, inherited, custom) if where.is_file() else inherited


def _group_tests(directory: Path, data: Path, flags: str, custom: bool) -> list[StdioTest]:
    """The tests of one group directory, then those of its groups below, each with the flags of
    the nearest ``testdata.yaml``."""
    flags = _nearest_flags(directory, flags, custom)
    group = directory.relative_to(data).as_posix()
    tests, groups = [], []
    for entry in sorted(directory.iterdir(), key=lambda p: _natural_key(p.name)):
        if entry.is_dir():
            groups.append(entry)
        elif entry.suffix == ".in":
            answer = entry.with_suffix(".ans")
            if not answer.is_file():
                raise PackageError(f"{entry}: no answer file {answer.name} beside it")
            name = f"{group}/{entry.stem}"
            test_input, test_answer = _read_data(entry, data), _read_data(answer, data)
            tests.append(StdioTest(name, test_input, test_answer, group, flags))
    for subgroup in groups:
        tests += _group_tests(subgroup, data, flags, custom)
    return tests


def _read_data(path: Path, data: Path) -> bytes:
    """A data file's bytes. A file that holds nothing but the relative path of another data
    file is a symbolic link checked out as text (git does that where links are off; problem
    packages link a test into several groups, as kattis-examples' oddecho does): read as the
    file it names, which must lie in the package's ``data/``."""
    content = path.read_bytes()
    if len(content) > 512 or not _LINK.fullmatch(content):
        return content
    target = (path.parent / content.decode().strip()).resolve()
    if target.is_file() and target.is_relative_to(data.resolve()) and target != path.resolve():
        return target.read_bytes()
    return content


_LINK = re.compile(rb"(?:\.\./|\./)+[\w./-]+\.(?:in|ans)\n?")


def _natural_key(name: str) -> tuple:
    """Sorts ``2.in`` before ``10.in`` (numbers by value), ties (``01``, ``1``) by the name."""
    parts = re.split(r"(\d+)", name)
    return (tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name)


def _reference_solution(directory: Path) -> str:
    """The first accepted Python 3 submission, or "": some packages carry Python 2 ones."""
    for path in sorted((directory / "submissions" / "accepted").glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "python2" not in text.partition("\n")[0]:
            return text
    return ""


def _statement(directory: Path) -> tuple[str, str] | None:
    """``(title, text)`` of the first statement found in :data:`STATEMENTS`' order."""
    for folder in ("problem_statement", "statement"):
        for name in STATEMENTS:
            path = directory / folder / name
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                if name.endswith(".html"):
                    return "", html_to_text(text)
                if name.endswith(".tex"):
                    return tex_to_text(text)
                return "", text.strip()
    return None


def tex_to_text(tex: str) -> tuple[str, str]:
    """A problemtools LaTeX statement as ``(title, text)``: sections as heading lines, items as
    ``- `` lines, comments and illustrations dropped, math kept as it is (models read TeX)."""
    tex = re.sub(r"(?<!\\)%.*", "", tex)
    title_match = re.search(r"\\problemname\{([^{}]*)\}", tex)
    tex = re.sub(r"\\problemname\{[^{}]*\}", "", tex)
    tex = re.sub(r"\\illustration(\{[^{}]*\})+", "", tex)
    tex = re.sub(r"\\(?:sub)?section\*?\{([^{}]*)\}", r"\n\n## \1\n\n", tex)
    tex = re.sub(r"\s*\\item\b\s*", "\n- ", tex)
    tex = re.sub(r"\\(?:begin|end)\{(?:itemize|enumerate)\}", "\n\n", tex)
    tex = re.sub(r"\\(?:emph|textbf|textit|texttt)\{([^{}]*)\}", r"\1", tex)
    tex = re.sub(r"\\(?:noindent|smallskip|medskip|bigskip)\b", "", tex)
    tex = tex.replace("``", '"').replace("''", '"')
    return (title_match.group(1).strip() if title_match else ""), _tidy(tex)


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def html_to_text(html: str) -> str:
    """An HTML statement as plain text: paragraphs and line breaks kept, ``<pre>`` (the samples)
    verbatim in a fenced block, other whitespace collapsed, ``A<sub>i</sub>`` as ``A_i``;
    Kick Start's ``$$$x$$$`` inline math (``$$$$`` display) as ``$x$`` (``$$``)."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    text = _tidy(re.sub(r" {2,}", " ", "".join(parser.out)))
    text = re.sub(r"\${3,4}", lambda m: "$" * (len(m.group()) - 2), text)
    return re.sub(r"\x00(\d+)\x00", lambda m: parser.blocks[int(m.group(1))], text)


_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_BLOCKS = ("p", "div", "ul", "ol", "table", "blockquote", "section", "dl", *_HEADINGS)
#: what a tag's start and end put in the text (headings as Markdown ones, as TeX's sections)
_OPENS = {t: "\n\n" for t in _BLOCKS} | {t: "\n\n## " for t in _HEADINGS} | {"li": "\n- "}
_OPENS |= {t: "\n" for t in ("br", "tr", "dt", "dd", "hr")}
_CLOSES = {t: "\n\n" for t in _BLOCKS}
_DROPPED = ("script", "style", "head", "title")
_VOID = ("br", "hr", "img", "input", "meta", "link", "wbr", "col", "source")


class _TextParser(HTMLParser):
    """Collects text; ``<pre>`` blocks are held apart as placeholders so tidying leaves them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.blocks: list[str] = []
        self._dropping: tuple[str, int] | None = None  # (tag, depth) of a dropped subtree
        self._pre: list[str] | None = None
        self._marks: list[int] = []  # where each open <sub>/<sup> started in out

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._dropping is not None:
            self._dropping = (self._dropping[0], self._dropping[1] + (tag == self._dropping[0]))
            return
        # Kick Start's copy and download buttons: icon ligatures and scripts, not text
        widget = any(k == "onclick" or "material-icons" in (v or "") for k, v in attrs)
        if self._pre is not None:
            return
        if (tag in _DROPPED or widget) and tag not in _VOID:
            self._dropping = (tag, 1)
        elif tag == "pre":
            self._pre = []
        elif tag in ("sub", "sup"):
            self._marks.append(len(self.out))
        else:
            self.out.append(_OPENS.get(tag, ""))

    def handle_endtag(self, tag: str) -> None:
        if self._dropping is not None:
            name, depth = self._dropping
            depth -= tag == name
            self._dropping = (name, depth) if depth else None
        elif self._pre is not None:
            if tag == "pre":
                self.out.append(f"\n\n```\n\x00{len(self.blocks)}\x00\n```\n\n")
                self.blocks.append("".join(self._pre).strip("\n"))
                self._pre = None
        elif tag in ("sub", "sup") and self._marks:
            start = self._marks.pop()
            inner = "".join(self.out[start:]).strip()
            mark = "_" if tag == "sub" else "^"
            self.out[start:] = [mark + (inner if len(inner) == 1 else f"{{{inner}}}")]
        else:
            self.out.append(_CLOSES.get(tag, ""))

    def handle_data(self, data: str) -> None:
        if self._pre is not None and self._dropping is None:
            self._pre.append(data)
        elif self._dropping is None:
            self.out.append(re.sub(r"\s+", " ", data))
