"""Every command the README documents names things that exist, and its links lead somewhere.

Cheap checks, no runs: each ``python -m X`` is a module Python can run, each ``--config`` file
and ``make`` target exists, each ``launch.train`` command's config and overrides validate (what
the run would check before starting any actor), and every relative link of the README and of
docs/ names a file, and a heading there when it has an anchor.
"""

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from launch.train import load_run_config, parse_args

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PLACEHOLDERS = {"FILE", "RUN_DIR", "PROBLEMS.jsonl", "SAMPLES.jsonl", "RESULTS.jsonl"}


def _fenced_commands(text: str) -> list[str]:
    """The lines of ```bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def _inline_commands(text: str) -> list[str]:
    spans = re.findall(r"`([^`\n]+)`", text)
    return [span for span in spans if re.match(r"(\S*python -m |make \w)", span)]


def commands(path: Path) -> list[list[str]]:
    text = path.read_text()
    return [shlex.split(line) for line in _fenced_commands(text) + _inline_commands(text)]


def _after(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words[:-1] else None


def _module_of(words: list[str]) -> str | None:
    return _after(words, "-m") if "python" in " ".join(words) else None


README_COMMANDS = commands(README)
MODULES = sorted(
    {m for path in [README, *DOCS] for words in commands(path) if (m := _module_of(words))}
    - {"pytest"}
)


def test_the_readme_has_commands():
    assert len(README_COMMANDS) > 10
    assert {"launch.train", "launch.evaluate", "launch.head", "sandbox.check"} <= set(MODULES)


def test_the_readme_is_a_front_door_not_a_manual():
    """The details live in docs/, which the README maps; it stays short enough to read."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    linked = set(re.findall(r"\]\(docs/([\w.]+\.md)", README.read_text()))
    assert {path.name for path in DOCS} <= linked, {path.name for path in DOCS} - linked


@pytest.mark.parametrize("module", MODULES)
def test_documented_module_runs_with_dash_m(module):
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"python -m {module}: no such module"
    if spec.submodule_search_locations:  # a package runs through its __main__
        assert importlib.util.find_spec(f"{module}.__main__"), f"{module} has no __main__"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda path: path.name)
def test_documented_config_files_exist(path):
    configs = {
        value
        for words in commands(path)
        for value in (_after(words, "--config"), _make_config(words))
        if value and value not in PLACEHOLDERS
    }
    missing = sorted(c for c in configs if not (ROOT / c).is_file())
    assert not missing, f"{path.name} names config files that do not exist: {missing}"


def _make_config(words: list[str]) -> str | None:
    assigned = [word.partition("=")[2] for word in words if word.startswith("CONFIG=")]
    return assigned[0] if words[:1] == ["make"] and assigned else None


def test_documented_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY: (.*)$", makefile, flags=re.M).group(1).split())
    targets = {words[1] for words in README_COMMANDS if words[:1] == ["make"] and len(words) > 1}
    assert targets and targets <= phony, f"make targets the Makefile lacks: {targets - phony}"


def _training_argv(words: list[str]) -> tuple[str, ...] | None:
    """What ``launch.train`` would get: its own arguments, or those ``make demo`` passes."""
    if _module_of(words) == "launch.train" and "--resume" not in words:
        return tuple(words[words.index("launch.train") + 1 :]) or None
    config = _make_config(words)
    return ("--config", config, "--overwrite") if config and words[1] == "demo" else None


#: Commands with a placeholder (``MODEL``, ``RUN_DIR``...) are examples of a form, not runnable.
TRAIN_COMMANDS = [
    argv
    for argv in dict.fromkeys(filter(None, map(_training_argv, README_COMMANDS)))
    if not PLACEHOLDERS & set(argv)
]


@pytest.mark.parametrize("argv", TRAIN_COMMANDS, ids=" ".join)
def test_documented_training_command_validates(argv):
    args, overrides = parse_args(list(argv))
    load_run_config(args, overrides)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)  # code blocks
    return {_anchor(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda path: path.name)
def test_relative_links_resolve(path):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        ):
            broken.append(target)
    assert not broken, f"{path.name} links to what is not there: {broken}"
