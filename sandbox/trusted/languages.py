"""The languages a whole program may be written in, and how a native one is built: in the
sandbox like any program, by the host's compiler in the read-only view; the binary comes back
as the execution's stdout. Where the host has no compiler, the job is a ``syntax_error``.
"""

from __future__ import annotations

import shutil

LANGUAGES = ("python", "c", "cpp")
#: How each native language is compiled, from ``main`` (the source) to ``prog``: problemtools'
#: flags (``-O2``, a GNU dialect, ``-lm`` for C).
COMPILERS = {
    "c": ("gcc", "-x c -std=gnu11 -O2 -o prog {source} -lm"),
    "cpp": ("g++", "-x c++ -std=gnu++17 -O2 -o prog {source}"),
}
COMPILE_TIME_S = 60.0
BINARY_MB = 64  # the most a compiled program may weigh (the compile's output limit)
SOURCE = "main"
BINARY = "prog"
STDERR_BYTES = 2048  # a compiler's first messages, or a traceback, kept for the detail


def compile_command(language: str, source: str = SOURCE) -> list[str]:
    """The native command that compiles ``source`` (beside the other files it includes) and
    writes the binary on stdout (the compiler's messages go to stderr). ``TMPDIR``: the
    scratch directory, the one place a program may write."""
    compiler, flags = COMPILERS[language]
    script = f"{compiler} {flags.format(source=source)} >&2 && cat {BINARY}"
    return ["/bin/sh", "-c", f"PATH=/usr/bin:/bin TMPDIR=. {script}"]


def missing_compiler(language: str) -> str | None:
    """Why ``language`` cannot be compiled on this host, or None."""
    if language not in COMPILERS:
        return None
    compiler = COMPILERS[language][0]
    if shutil.which(compiler, path="/usr/bin:/bin") is None:
        return f"no {compiler} on this host (/usr/bin, /bin)"
    return None
