"""``python -m bench.learner.lm_head``: the LM head's forward + backward on each path."""

import json

from bench.learner.lm_head import main


def test_the_head_bench_runs_every_path(capsys):
    """``python -m bench.learner.lm_head``: one JSON line per path; the fused path's first run
    compiles and is not counted (compiled code does not run under the live-tensor counter)."""
    flags = ["--hidden", "16", "--vocab", "256", "--chunks", "8", "--repeats", "1"]
    assert main([*flags, "--paths", "checkpoint", "function", "fused"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["path"] for r in rows] == ["checkpoint", "function", "fused"]
    assert rows[2]["peak_live_mib"] is None and all(r["fwd_bwd_s"] >= 0 for r in rows)
    assert all(isinstance(r["peak_live_mib"], int) for r in rows[:2])
