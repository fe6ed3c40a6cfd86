"""The console of ``python -m launch.train`` (launch/console.py): which lines a person sees, on
lines copied from real runs (the demo's output, an actor that crashed), and the filter's pipes in
a process of its own: every line in the log, the project's on the terminal, nothing lost to a
line longer than the pipe's buffer, to binary junk or to a filter that breaks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launch.console import Classifier
from tests.conftest import REPO_ROOT

RAY = "\x1b[36m(RolloutWorker pid=31707)\x1b[0m "
LEARNER = "\x1b[36m(Learner pid=31601)\x1b[0m "
CRASHED = "\x1b[36m(A pid=7445)\x1b[0m "
SO = (
    "/work/main/.venv/lib/python3.11/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"
)
PYTREE = (
    ".venv/lib/python3.11/site-packages/torch/utils/_pytree.py:630] <enum 'KernelPreference'> is "
    "an Enum subclass and is now natively supported by torch.compile as an opaque value type."
)
#: Other libraries' lines of the demo's output (driver's, and forwarded from the actors).
HIDDEN = [
    f"2026-12-06 08:02:44,568 torchao: Failed to load {SO}: Could not load this library: {SO}",
    f"W1206 08:02:44.886000 31028 {PYTREE}",
    "\rWriting model shards:   0%|          | 0/1 [00:00<?, ?it/s]\rWriting model shards: 100%|"
    "██████████| 1/1 [00:00<00:00, 362.48it/s]",
    "2026-12-06 08:02:45,688\tWARNING authentication_token_setup.py:85 -- Token authentication "
    "is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.",
    f"{LEARNER}Failed to load {SO}: Could not load this library: {SO}",
    f"{LEARNER}W1206 08:03:12.499000 31601 {PYTREE}",
    f"{RAY}Triton is installed, but doesn't include CPU backend. Disabling Triton.",
    f"{RAY}/work/main/.venv/lib/python3.11/site-packages/vllm/triton_utils/dispatcher.py:138: "
    "FutureWarning: `torch.distributed.reduce_op` is deprecated, please use "
    "`torch.distributed.ReduceOp` instead",
    f'{RAY}  if hasattr(value, "__dict__"):',
    f"{RAY}[W1206 08:03:19.340397384 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy "
    "for memory allocation on the NUMA nodes (0). (function init_cpu_memory_env)",
    f"{RAY}libtcmalloc is not found in LD_PRELOAD. For best performance, please follow the "
    "section `set LD_PRELOAD` in https://docs.vllm.ai/en/latest/getting_started/installation/cpu/",
    f"{RAY}\rLoading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
    RAY,
    f"{RAY}CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding, "
    "skip it.",
    "2026-12-06 08:10:32,053 WARNING torchao: Failed to load (the filter's format: with a level)",
]
#: The project's lines, the progress line, errors, and other libraries' errors.
SHOWN = [
    "2026-12-06 08:02:56,209 launch.fleet.cluster: started a local Ray cluster",
    "2026-12-06 08:03:20,838 launch.train: sandbox: 2 workers, isolation namespaces(user,net,pid,"
    "mount,ipc)+view+locked+seccomp+rlimits+cgroup(memory,pids); own /proc; pinned to CPUs [1, 0]",
    "2026-12-06 08:03:28,050 launch.loop.driver: step 5: checkpoint saved to "
    "/tmp/b_runs/demo/checkpoints/step-0000005",
    "[####................] step    1/5 | reward 0.008 | pass 0.01 | loss +0.0000 | kl 0.0000 | "
    "|dlogp| 0.0008 | 7.94s/step | eta    --",
    "error: ray.address: nothing answers at 127.0.0.1:1 (Connection refused): start the head "
    "there (ray start --head), or give its address",
    "full log: /tmp/b_runs/demo/train.log",
    # a project logger in an actor, forwarded by Ray (as an actor that formats its records logs)
    f"{RAY}2026-12-06 08:03:20,829 actor.rollout_worker: engine ready",
    f"{LEARNER}2026-12-06 08:03:21,001 learner.learner: rank 0 of 1",
    # other libraries' errors: Ray's, glog's, Ray's C++ and its raylet's, a fault handler's
    "2026-12-06 08:05:59,751\tERROR worker.py:439 -- Unhandled error (suppress with "
    "'RAY_IGNORE_UNHANDLED_ERRORS=1'): \x1b[36mray::A.raise_()\x1b[39m (pid=8261, ip=192.0.2.2)",
    "2026-12-06 08:10:32,053 ERROR vllm.engine: the engine died (the filter's format)",
    "E1206 08:03:12.499000 31601 torch/csrc/distributed/c10d/ProcessGroup.cpp:12] a failure",
    f"{CRASHED}*** SIGSEGV received at time=1796544353 on cpu 1 ***",
    f"{CRASHED}[2026-12-06 08:05:53,824 E 7445 7445] logging.cc:474: *** SIGSEGV received at "
    "time=1796544353 on cpu 1 ***",
    f"{CRASHED}Fatal Python error: Segmentation fault",
    "\x1b[33m(raylet)\x1b[0m A worker died or was killed while executing a task by an unexpected "
    "system error. To troubleshoot the problem, check the logs for the dead worker.",
]


@pytest.mark.parametrize("line", HIDDEN)
def test_other_libraries_lines_are_hidden(line):
    assert not Classifier().shown(line)


@pytest.mark.parametrize("line", SHOWN)
def test_the_runs_own_lines_and_errors_are_shown(line):
    assert Classifier().shown(line)


def _judged(lines: list[tuple[bool, str]]) -> None:
    classifier = Classifier()
    got = [(classifier.shown(line), line) for _, line in lines]
    assert got == lines


def test_a_traceback_is_shown_through_its_exception_line_whoever_writes_between():
    # Ray forwards a crashed actor's traceback while another actor's (vLLM's) lines come between
    _judged([
        (False, f"{RAY}Reset SSM cache type to float32 for accelerated GDN mamba backend 'none'."),
        (True, f"{CRASHED}Traceback (most recent call last):"),
        (True, f'{CRASHED}  File "/tmp/raycrash.py", line 12, in f'),
        (False, f"{RAY}Model Runner V2 requires Triton; using the V1 model runner instead."),
        (True, f"{CRASHED}    1/0"),
        (True, f"{CRASHED}    ~^~"),
        (True, f"{CRASHED}ZeroDivisionError: division by zero"),
        (True, f"{CRASHED}"),
        (True, f"{CRASHED}During handling of the above exception, another exception occurred:"),
        (True, f"{CRASHED}"),
        (True, f"{CRASHED}Traceback (most recent call last):"),
        (True, f'{CRASHED}  File "/tmp/raycrash.py", line 14, in f'),
        (True, f"{CRASHED}ray.exceptions.RayActorError: The actor died unexpectedly"),
        (True, f"{CRASHED}\tclass_name: A"),  # the exception's own indented lines
        (False, f"{CRASHED}Triton is not installed. triton-cpu is expected on x86 CPUs."),
    ])  # fmt: skip


def test_an_errors_indented_rest_goes_with_it_and_a_warnings_with_the_warning():
    _judged([
        (True, "error: invalid configuration:"),
        (True, "  rollout: batch_size (12) must be a multiple of group_size (8): advantages are"),
        (False, f"{RAY}/work/main/.venv/lib/python3.11/site-packages/vllm/triton_utils/"
                "dispatcher.py:139: FutureWarning: `torch.distributed.reduce_op` is deprecated"),
        (False, f'{RAY}  wrapper = lookup(vars(value).get("kernel"))'),
        (True, "error: the learner died and could not be recovered (RayActorError); the last "
               "checkpoint is at step 4: continue with"),
        (True, "  python -m launch.train --resume runs/demo"),
    ])  # fmt: skip


#: launch.train's console set-up, then output of every kind, through fds 1 and 2 as it comes
#: from C code and Ray's forwarding: argv[1] the log, argv[2] how the filter is run.
PROGRAM = r"""
import logging, os, sys
from pathlib import Path

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
from launch import console

if sys.argv[2] == "broken":  # the classifier fails on the first line
    console.Classifier.shown = lambda self, line: 1 / 0
if sys.argv[2] == "dead":  # the reader thread dies at once (it waits with poll)
    console.select.poll = None
started = console.start()
if sys.argv[2] == "dead":  # dead, fds 1 and 2 given back, before the first write: else lines
    started._thread.join(60)  # written before the give-back reach the terminal after later ones
logging.getLogger("launch.demo").info("the run's own line")
logging.getLogger("vllm.engine").info("an info of vLLM's")
logging.getLogger("torchao").warning("a warning of torchao's")
logging.getLogger("ray.worker").error("an error of Ray's")
os.write(1, b"binary \xff\xfe junk\n")
os.write(2, b"error: " + b"x" * (3 << 20) + b"\n")  # a pipe holds 64 KiB; pieces of 1 MiB
os.write(1, b"y" * (3 << 20) + b"\n")
log = Path(sys.argv[1])
console.log_to(log.parent if sys.argv[2] == "unwritable" else log, sys.argv[2] == "append")
print("\rLoading weights: 100%|##########| 26/26")
print("[####................] step    1/5 | reward 0.008 | pass 0.01 | eta    --")
sys.stdout.write("a last line without its newline")
raise ValueError("the end")
"""
LONG = {"x" * (3 << 20): "x..", "y" * (3 << 20): "y.."}


def _program(tmp_path: Path, how: str) -> tuple[list[str], list[str], list[str]]:
    """The program's stdout, stderr and log, in lines (times and long runs shortened)."""
    log = tmp_path / "train.log"
    log.write_bytes(b"an earlier run's line\n")
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(log), how],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-3000:]

    def lines(data: bytes) -> list[str]:
        text = data.decode(errors="replace")
        for long, short in LONG.items():
            text = text.replace(long, short)
        return [re.sub(r"^\d{4}-\d\d-\d\d [\d:,]+ ", "T ", line) for line in text.split("\n")]

    return lines(done.stdout), lines(done.stderr), lines(log.read_bytes())


TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "<string>", line 27, in <module>',
    "ValueError: the end",
]


def test_the_terminal_gets_the_runs_lines_and_the_log_gets_every_line(tmp_path):
    out, err, log = _program(tmp_path, "fresh")
    assert out == [
        f"full log: {tmp_path / 'train.log'}",
        "[####................] step    1/5 | reward 0.008 | pass 0.01 | eta    --",
        "",
    ]
    assert err == [
        "T launch.demo: the run's own line",
        "T ERROR ray.worker: an error of Ray's",
        "error: x..",
        *TRACEBACK,
        "",
    ]
    # every line but vLLM's INFO (below WARNING: not even logged), the earlier run's gone
    assert sorted(log) == sorted([
        "", *out[:-1], *err[:-1], "T WARNING torchao: a warning of torchao's",
        "binary \ufffd\ufffd junk", "y..", "\rLoading weights: 100%|##########| 26/26",
        "a last line without its newline",
    ])  # fmt: skip


def test_a_resumed_run_appends_to_its_log(tmp_path):
    _, _, log = _program(tmp_path, "append")
    assert log[0] == "an earlier run's line" and "T launch.demo: the run's own line" in log


#: Every line of the program but ``full log:``, on stdout and on stderr.
EVERY_OUT = [
    "binary \ufffd\ufffd junk",
    "y..",
    "\rLoading weights: 100%|##########| 26/26",
    "[####................] step    1/5 | reward 0.008 | pass 0.01 | eta    --",
    "a last line without its newline",
]
EVERY_ERR = [
    "T launch.demo: the run's own line",
    "T WARNING torchao: a warning of torchao's",
    "T ERROR ray.worker: an error of Ray's",
    "error: x..",
    *TRACEBACK,
]


@pytest.mark.parametrize("how", ["broken", "dead"])
def test_a_filter_that_fails_hands_every_line_to_the_terminal(tmp_path, how):
    out, err, _ = _program(tmp_path, how)
    full_log = f"full log: {tmp_path / 'train.log'}"
    assert [line for line in out if line] == [*EVERY_OUT[:2], full_log, *EVERY_OUT[2:]]
    assert [line for line in err if line] == EVERY_ERR


def test_a_log_that_cannot_be_written_hands_every_line_to_the_terminal(tmp_path):
    out, err, _ = _program(tmp_path, "unwritable")
    assert f"warning: cannot write {tmp_path} (Is a directory): every line shown" in out
    assert {*EVERY_OUT, *EVERY_ERR} <= {*out, *err}


def test_an_actors_project_lines_are_known_for_the_runs_own_once_forwarded():
    # what Ray's worker_process_setup_hook would run in each actor (launch.console.worker_logging)
    program = (
        "import logging; from launch.console import worker_logging; worker_logging(); "
        "logging.getLogger('actor.rollout_worker').info('engine ready'); "
        "logging.getLogger('actor.rollout_worker').warning('woke without weights'); "
        "logging.getLogger('vllm.engine').warning('a warning of vLLM')"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    ours, theirs = done.stderr.splitlines()  # the project's INFO line is not written
    assert ours.endswith(" actor.rollout_worker: woke without weights")
    assert theirs == "a warning of vLLM"
    classifier = Classifier()
    assert classifier.shown(f"{RAY}{ours}") and not classifier.shown(f"{RAY}{theirs}")


def test_a_tools_own_lines_are_shown_beside_the_projects():
    """launch.evaluate's console: its printed lines (``extra``) and errors, not vLLM's."""
    from launch.evaluate import CONSOLE_LINES

    classifier = Classifier(extra=CONSOLE_LINES)
    shown = [
        "settings from runs/demo/config.toml: problems synthetic (flags override them)",
        "evaluating runs/demo/checkpoint on 10 problems x 10 samples",
        "10/10 problems, 99/100 samples passed",
        "10 problems x 10 samples: pass@1 0.9900  pass@10 1.0000",
        "wrote runs/eval/samples.jsonl and runs/eval/summary.json",
        "error: --out: runs/eval already holds an evaluation (summary.json): give --overwrite",
    ]
    hidden = [
        "CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding",
        "Passing raw prompts to InputProcessor is deprecated and will be removed in the future.",
    ]
    assert all(classifier.shown(line) for line in shown)
    assert not any(classifier.shown(line) for line in hidden)
    assert not Classifier().shown(shown[1])  # launch.train's console does not show them
