"""Programs that run away (time, memory, output, processes, recursion, signals) end with the
verdict of the limit they hit, and the pool serves the next program."""

from __future__ import annotations

from common.types import Verdict
from tests.unit.sandbox.helpers import GOOD_F, run


def test_timeout_kills_infinite_loop(pool):
    assert run(pool, "def f(x):\n    while True: pass\n").verdict is Verdict.TIMEOUT


def test_timeout_kills_sleep(pool):
    assert run(pool, "import time\ndef f(x):\n    time.sleep(100)\n").verdict is Verdict.TIMEOUT


def test_timeout_cannot_be_swallowed(pool):
    code = """
        import signal
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU):
            signal.signal(s, signal.SIG_IGN)
        def f(x):
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    pass
    """
    assert run(pool, code).verdict is Verdict.TIMEOUT


def test_spinning_threads_time_out(pool):
    code = """
        import threading
        def spin():
            while True:
                pass
        for _ in range(8):
            threading.Thread(target=spin, daemon=True).start()
        def f(x):
            while True:
                pass
    """
    assert run(pool, code).verdict is Verdict.TIMEOUT


def test_sigstop_to_self_times_out_or_passes_and_pool_serves(pool):
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n" + GOOD_F
    assert run(pool, code).verdict in (Verdict.TIMEOUT, Verdict.PASSED)
    assert run(pool, GOOD_F).passed


def test_fork_storm_is_contained(pool):
    code = """
        import os
        def f(x):
            for _ in range(10000):
                try:
                    os.fork()
                except OSError:
                    pass
            return x + 1
    """
    assert run(pool, code).verdict in (Verdict.TIMEOUT, Verdict.PASSED, Verdict.RUNTIME_ERROR)
    assert run(pool, GOOD_F).passed


def test_huge_allocation_hits_memory_limit(pool):
    assert (
        run(pool, "def f(x):\n    return len(bytearray(10**10))\n").verdict is Verdict.MEMORY_LIMIT
    )


def test_print_flood_hits_output_limit(pool):
    code = "def f(x):\n    while True:\n        print('x' * 10000)\n"
    assert run(pool, code).verdict is Verdict.OUTPUT_LIMIT


def test_huge_file_hits_output_limit(pool):
    code = "def f(x):\n    with open('big', 'wb') as fh:\n"
    code += "        while True:\n            fh.write(b'x' * 2**20)\n"
    assert run(pool, code).verdict in (Verdict.OUTPUT_LIMIT, Verdict.RUNTIME_ERROR)


def test_closed_stdout_is_harmless(pool):
    code = "import os, sys\nsys.stdout.close()\nos.close(1)\n" + GOOD_F
    assert run(pool, code).verdict is Verdict.PASSED


def test_reading_stdin_gets_eof(pool):
    assert run(pool, "x = input()\n" + GOOD_F).verdict is Verdict.RUNTIME_ERROR


def test_deep_recursion_is_runtime_error(pool):
    assert run(pool, "def f(x):\n    return f(x + 1)\n").verdict is Verdict.RUNTIME_ERROR


def test_unbounded_recursion_limit_is_contained(pool):
    code = "import sys\nsys.setrecursionlimit(10**7)\ndef f(x):\n    return f(x + 1)\n"
    verdict = run(pool, code).verdict
    assert verdict in (Verdict.RUNTIME_ERROR, Verdict.MEMORY_LIMIT, Verdict.TIMEOUT)
    assert run(pool, GOOD_F).passed


def test_segfault_is_runtime_error(pool):
    assert (
        run(pool, "import ctypes\ndef f(x):\n    ctypes.string_at(0)\n").verdict
        is Verdict.RUNTIME_ERROR
    )
