"""The driver's metrics as Prometheus names (``launch/loop/telemetry.py``), and the Grafana
dashboard that queries them."""

from __future__ import annotations

import json

from launch.loop.telemetry import prometheus_name
from tests.conftest import REPO_ROOT


def test_grafana_dashboard_queries_metrics_the_driver_exports():
    dashboard = json.loads((REPO_ROOT / "launch/grafana_dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert any(prometheus_name("reward/mean") in expr for expr in exprs)
    assert prometheus_name("eval/pass@1") == "grpo_eval_pass_1"
    assert all(expr.startswith("ray_grpo_") for expr in exprs)
