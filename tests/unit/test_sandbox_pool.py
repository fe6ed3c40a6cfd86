"""Hostile and honest programs through one shared pool: each gets the right verdict."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from common.config import SandboxConfig
from common.types import ExecutionJob, Verdict
from sandbox.isolated.child import SERVER_COMPILE_MAX
from sandbox.trusted.pool import SandboxPool
from sandbox.wire.levels import LEVEL_FULL
from tests.unit.sandbox_helpers import CONFIG, F_TESTS, GOOD_F, run, shared_pool


@pytest.fixture(scope="module", params=["auto", "python"], ids=["c_loop", "python_loop"])
def pool(request):
    with shared_pool(request.param) as shared:
        yield shared


def test_isolation_is_probed_and_reported(pool):
    assert pool.isolation == LEVEL_FULL
    assert pool.stats()["sandbox/isolation_level"] == 2.0
    line = pool.describe()  # what launch.train logs
    assert line.startswith(f"2 workers, isolation {LEVEL_FULL}; ")
    assert pool.pinning in line and line.endswith(pool.zygote_loop)


def test_honest_solution_passes(pool):
    assert run(pool, GOOD_F).verdict is Verdict.PASSED


def test_honest_prints_imports_and_scratch_files_pass(pool):
    code = """
        import collections, heapq, itertools, tempfile
        print("debug output")
        with open("notes.txt", "w") as fh:
            fh.write("ok")
        with tempfile.TemporaryFile() as tmp:
            tmp.write(b"x")
        def f(x):
            return open("notes.txt").read() and x + 1
    """
    assert run(pool, code).verdict is Verdict.PASSED


def test_modules_left_out_of_the_preloads_import_in_the_child(pool):
    """The zygote preloads only what programs commonly import; the rest loads in the child,
    C extensions included, from the read-only view of the interpreter's files."""
    code = """
        import datetime, decimal, fractions, random, statistics, unicodedata
        def f(x):
            assert datetime.date(2024, 1, 1).isoweekday() == 1
            assert decimal.Decimal("0.1") * 3 == decimal.Decimal("0.3")
            assert statistics.mean([fractions.Fraction(1, 2), 1]) == fractions.Fraction(3, 4)
            assert unicodedata.name("a") == "LATIN SMALL LETTER A"
            return x + 1 + int(random.random())
    """
    assert run(pool, code).verdict is Verdict.PASSED


def test_slow_but_within_limit_passes(pool):
    assert run(pool, "import time\ndef f(x):\n    time.sleep(0.3)\n    return x + 1\n").passed


def test_wrong_answer_fails_with_partial_credit(pool):
    result = run(pool, "def f(x):\n    return 2 if x == 1 else 0\n")
    assert result.verdict is Verdict.FAILED and result.tests_passed == 1 and result.tests_total == 2


def test_stop_at_first_failure_stops(pool):
    result = run(pool, "def f(x):\n    return 0\n", stop=True)
    assert result.verdict is Verdict.FAILED and result.test_verdicts == [Verdict.FAILED]


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


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)", "raise SystemExit(0)"])
def test_exit_before_tests_is_runtime_error(pool, exit_call):
    code = f"import os, sys\n{GOOD_F}{exit_call}\n"
    assert run(pool, code).verdict is Verdict.RUNTIME_ERROR


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)"])
def test_exit_during_tests_is_runtime_error(pool, exit_call):
    code = f"import os, sys\ndef f(x):\n    {exit_call}\n"
    result = run(pool, code)
    assert result.verdict is Verdict.RUNTIME_ERROR and result.tests_passed == 0


def test_atexit_and_printed_markers_do_not_pass(pool):
    code = """
        import atexit, os
        atexit.register(lambda: print("ALL TESTS PASSED"))
        print('{"t": "end"}', "PASSED", flush=True)
        def f(x):
            print("assert passed")
            return 0
        os.write(1, b"ok\\n")
    """
    assert run(pool, code).verdict is Verdict.FAILED


def test_lying_eq_objects_fail(pool):
    code = """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        class LiarInt(int):
            def __eq__(self, other):
                return True
        def f(x):
            return Anything() if x == 1 else LiarInt(0)
    """
    result = run(pool, code)
    assert result.verdict is Verdict.FAILED and result.tests_passed == 0


def test_lying_str_subclass_fails(pool):
    code = "class S(str):\n    def __eq__(self, o):\n        return True\n"
    code += "def f(x):\n    return S('no')\n"
    assert run(pool, code, ("assert f(1) == 'yes'",)).verdict is Verdict.FAILED


def test_counter_equals_dict_literal(pool):
    code = "from collections import Counter\ndef f(s):\n    return Counter(s)\n"
    assert run(pool, code, ("assert f('aab') == {'a': 2, 'b': 1}",)).passed


def test_frame_walking_and_gc_find_no_expected_value(pool):
    code = """
        import gc, sys
        def f(x):
            prefix = "s3cr3t" + "-"
            seen = []
            frame = sys._getframe()
            while frame is not None:
                seen += list(frame.f_locals.values()) + list(frame.f_globals.values())
                frame = frame.f_back
            for obj in gc.get_objects() + seen:
                items = list(obj.values()) if isinstance(obj, dict) else [obj]
                for item in obj if isinstance(obj, (list, tuple)) else items:
                    if isinstance(item, str) and item.startswith(prefix) and item != prefix:
                        return item
            return None
    """
    assert run(pool, code, ("assert f(1) == 's3cr3t-42'",)).verdict is Verdict.FAILED


def test_patched_builtins_and_json_gain_nothing(pool):
    code = """
        import builtins, json
        json.dumps = lambda *a, **k: '{"t": "test", "i": 0, "ok": true}'
        builtins.len = lambda x: 3
        builtins.isinstance = lambda *a: True
        def f(x):
            return [0]
    """
    result = run(pool, code, ("assert len(f(1)) == 3",))
    assert result.verdict is not Verdict.PASSED


def test_writing_outside_scratch_fails(pool):
    path = f"/tmp/sandbox-escape-{os.getpid()}"
    result = run(pool, f"open({path!r}, 'w').write('x')\n" + GOOD_F)
    assert result.verdict is Verdict.RUNTIME_ERROR and not os.path.exists(path)


def test_deleting_host_files_fails(pool):
    with tempfile.NamedTemporaryFile(dir="/tmp", delete=False) as fh:
        fh.write(b"precious")
    try:
        os.chmod(fh.name, 0o666)
        result = run(pool, f"import os\nos.remove({fh.name!r})\n" + GOOD_F)
        assert result.verdict is Verdict.RUNTIME_ERROR
        with open(fh.name, "rb") as check:
            assert check.read() == b"precious"
    finally:
        os.unlink(fh.name)


def test_host_processes_are_not_visible_in_proc(pool):
    # The host's /proc would list every process of the machine, command lines included.
    assert pool.own_proc
    code = (
        "import os\n"
        "def f(x):\n"
        "    return sorted(int(e) for e in os.listdir('/proc') if e.isdigit())"
        " == [1, os.getpid()]\n"
    )
    assert run(pool, code, tests=("assert f(0) == True",)).passed


@pytest.mark.parametrize(
    "where",
    [
        "/tmp",  # another job's temporary files
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # a checkout (datasets)
    ],
)
def test_host_files_are_not_even_readable(pool, where):
    # A world-readable file the program knows the path of, e.g. a dataset with the reference
    # answers: outside the interpreter's and the sandbox's own directories it does not exist.
    with tempfile.NamedTemporaryFile(dir=where, prefix="answers-", delete=False) as fh:
        fh.write(b"def f(x):\n    return x + 1\n")
    try:
        os.chmod(fh.name, 0o644)
        code = f"exec(open({fh.name!r}).read())\n"
        assert run(pool, code).verdict is Verdict.RUNTIME_ERROR
        probe = f"import os\nassert not os.path.exists({fh.name!r})\n" + GOOD_F
        assert run(pool, probe).verdict is Verdict.PASSED  # the file is not there at all
    finally:
        os.unlink(fh.name)


def test_interpreter_and_system_files_stay_readable(pool):
    code = """
        import os, sys, json, decimal
        assert os.path.isfile(os.__file__) and os.path.isdir(sys.base_prefix)
        open("/etc/hostname" if os.path.exists("/etc/hostname") else os.__file__).read()
        def f(x):
            return x + 1
    """
    assert run(pool, code).verdict is Verdict.PASSED


def test_loopback_connection_never_arrives(pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n" + GOOD_F
    try:
        assert run(pool, code).verdict is Verdict.RUNTIME_ERROR
        with pytest.raises(OSError):
            server.accept()
    finally:
        server.close()


def test_killing_the_parent_does_not_break_the_pool(pool):
    code = "import os\nos.kill(os.getppid(), 9)\nos.kill(1, 9)\n" + GOOD_F
    assert run(pool, code).verdict is not Verdict.INFRA_ERROR
    assert run(pool, GOOD_F).passed


def test_environment_secrets_are_not_visible(pool, monkeypatch):
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2")
    code = "import os\ndef f(x):\n"
    code += "    return len(os.environ) + (os.getenv('SANDBOX_TEST_SECRET') is not None)\n"
    assert run(pool, code, ("assert f(1) == 0",)).passed


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


def test_huge_file_hits_output_limit(pool):
    code = "def f(x):\n    with open('big', 'wb') as fh:\n"
    code += "        while True:\n            fh.write(b'x' * 2**20)\n"
    assert run(pool, code).verdict in (Verdict.OUTPUT_LIMIT, Verdict.RUNTIME_ERROR)


# The server compiles programs up to child.SERVER_COMPILE_MAX; a larger one is compiled in the
# child. Either way a program must behave as under ``python FILE``.
PADDING = {"compiled_by_server": "", "compiled_in_child": "#" * (SERVER_COMPILE_MAX + 1) + "\n"}


@pytest.mark.parametrize("where", PADDING)
def test_syntax_error(pool, where):
    result = run(pool, PADDING[where] + "def f(x) return x")
    assert result.verdict is Verdict.SYNTAX_ERROR
    assert result.detail.startswith("SyntaxError: ")


@pytest.mark.parametrize("where", PADDING)
def test_nul_bytes_are_syntax_error(pool, where):
    code = PADDING[where] + "def f(x):\n    return x + 1\x00\n"
    assert run(pool, code).verdict is Verdict.SYNTAX_ERROR


@pytest.mark.parametrize("where", PADDING)
def test_annotations_are_evaluated_as_python_does(pool, where):
    """No ``from __future__ import annotations`` leaks from the harness into the program."""
    code = PADDING[where] + "def f(x: int) -> int:\n    return x + 1\n"
    assert run(pool, code, ("assert f.__annotations__['x'] is int", *F_TESTS)).passed
    undefined = run(pool, PADDING[where] + "def f(x: Undefined):\n    return x + 1\n")
    assert undefined.verdict is Verdict.RUNTIME_ERROR
    assert "NameError" in undefined.detail


def test_huge_source_is_rejected(pool):
    assert run(pool, "x = 1\n" * 300_000 + GOOD_F).verdict is Verdict.SYNTAX_ERROR


def test_results_keep_input_order_in_parallel(pool):
    jobs = [ExecutionJob(f"def f(x):\n    return {i}\n", ("assert f(0) == 3",)) for i in range(10)]
    results = pool.run(jobs)
    assert [r.passed for r in results] == [i == 3 for i in range(10)]


def test_cache_hits_are_counted():
    with SandboxPool(SandboxConfig(num_workers=1)) as cached:
        job = ExecutionJob(GOOD_F, F_TESTS)
        first, second = cached.run([job, job])[0], cached.run([job])[0]
        assert first.passed and second.passed
        assert cached.stats()["sandbox/cache_hits"] == 1.0


def test_close_leaves_no_processes_or_files():
    temp_pool = SandboxPool(SandboxConfig(num_workers=2))
    temp_pool.run([ExecutionJob("import os, time\nos.fork()\nos.setsid()", ())])
    workers = [psutil.Process(w.proc.pid) for w in temp_pool._workers]
    family = workers + [c for w in workers for c in w.children(recursive=True)]
    temp_pool.close()
    time.sleep(0.1)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not os.path.exists(temp_pool._dir)


ALLOWED_CPUS = sorted(os.sched_getaffinity(0))
AFFINITY = "import os\ndef f():\n    return sorted(os.sched_getaffinity(0))\n"


def _affinities(worker) -> list[list[int]]:
    """CPU affinity of a worker's processes: its server and the server's zygote."""
    server = psutil.Process(worker.proc.pid)
    return [p.cpu_affinity() for p in [server, *server.children(recursive=True)]]


def test_each_worker_is_pinned_to_its_own_cpu_by_default(pool):
    from_last = ALLOWED_CPUS[::-1]  # vLLM-CPU's OpenMP binding takes them from the first
    expected = [from_last[i % len(from_last)] for i in range(CONFIG.num_workers)]
    assert pool.cpus == expected
    for worker in pool._workers:
        assert _affinities(worker) == [[worker.cpu]] * 2  # server and zygote
    # and so is every child, whichever worker runs it
    jobs = [ExecutionJob(AFFINITY, (f"assert f() in {[[c] for c in expected]}",))] * 6
    assert all(r.passed for r in pool.run(jobs))


def test_zygote_maps_no_compression_library(pool):
    """Every fork copies the zygote's mappings and every exit tears them down (~1 us each, a
    library is five): the worker once parsed its options with argparse, whose help formatter
    imports shutil and with it zlib, bz2 and lzma, six libraries that no program asked for."""
    for worker in pool._workers:
        (zygote,) = psutil.Process(worker.proc.pid).children()
        with open(f"/proc/{zygote.pid}/maps") as fh:
            files = {line.split()[-1].rsplit("/", 1)[-1] for line in fh if "/" in line}
        assert any(name.startswith("libpython") for name in files)  # the listing is complete
        compression = ("libz.", "libbz2.", "liblzma.", "zlib.", "_bz2.", "_lzma.")
        assert [name for name in files if name.startswith(compression)] == []


def test_cpu_affinity_list_and_none():
    last = ALLOWED_CPUS[-1]
    config = SandboxConfig(num_workers=2, cache=False, cpu_affinity=[last])
    with SandboxPool(config) as pinned:
        assert [_affinities(w) for w in pinned._workers] == [[[last]] * 2] * 2
        assert run(pinned, AFFINITY, [f"assert f() == [{last}]"]).passed
    with SandboxPool(SandboxConfig(num_workers=1, cache=False, cpu_affinity="none")) as free:
        assert free.cpus == [None]
        assert run(free, AFFINITY, [f"assert f() == {ALLOWED_CPUS}"]).passed


def test_cpu_affinity_outside_the_allowed_cpus_is_a_clear_error():
    config = SandboxConfig(num_workers=1, cpu_affinity=[ALLOWED_CPUS[-1] + 1000])
    with pytest.raises(ValueError, match=r"sandbox\.cpu_affinity: CPUs \[\d+\] are not avail"):
        SandboxPool(config)


def test_job_larger_than_a_pipe_buffer_reaches_the_child(pool):
    padding = "# " + "x" * 200 + "\n"
    code = padding * 2000 + GOOD_F  # ~400 KB, several pipe buffers
    assert run(pool, code).verdict is Verdict.PASSED


def test_dead_worker_with_jobs_in_flight_is_replaced_and_nothing_is_lost():
    config = SandboxConfig(num_workers=1, timeout_s=5.0, test_timeout_s=3.0, cache=False)
    slow = "import time\ntime.sleep(1.0)\n" + GOOD_F
    jobs = [ExecutionJob(slow, F_TESTS)] + [ExecutionJob(GOOD_F, F_TESTS)] * 3
    with SandboxPool(config) as solo:
        server = solo._workers[0].proc.pid
        killer = threading.Timer(0.4, os.kill, (server, signal.SIGKILL))
        killer.start()
        results = solo.run(jobs)
        killer.join()
        assert [r.verdict for r in results] == [Verdict.PASSED] * 4
        assert solo.stats()["sandbox/worker_restarts"] == 1.0
        assert solo._workers[0].proc.pid != server


def test_verdict_fractions_count_cached_results():
    # The training metrics describe every judged completion: a cached result still counts.
    with SandboxPool(SandboxConfig(num_workers=1)) as cached:
        good, bad = (
            ExecutionJob(GOOD_F, F_TESTS),
            ExecutionJob("def f(x):\n    return 0\n", F_TESTS),
        )
        cached.run([good])
        cached.run([bad])
        cached.run([bad])
        stats = cached.stats()
        assert stats["sandbox/cache_hits"] == 1.0
        assert stats["sandbox/verdict/failed"] == pytest.approx(2 / 3)


def test_directory_of_a_killed_pool_is_removed_by_the_next_pool():

    from sandbox.trusted.pool import remove_abandoned_dirs

    script = (
        "import time\nfrom common.config import SandboxConfig\n"
        "from sandbox.trusted.pool import SandboxPool\n"
        "pool = SandboxPool(SandboxConfig(num_workers=1))\nprint(pool._dir, flush=True)\n"
        "time.sleep(120)\n"
    )
    crashed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    abandoned = crashed.stdout.readline().strip()
    crashed.kill()  # SIGKILL: close() never runs
    crashed.wait()
    assert os.path.isdir(abandoned)
    with SandboxPool(SandboxConfig(num_workers=1)) as live:
        assert not os.path.exists(abandoned)  # the new pool removed it on start
        assert remove_abandoned_dirs(tempfile.gettempdir()) == []  # its own dir is kept
        assert os.path.isdir(live._dir)
