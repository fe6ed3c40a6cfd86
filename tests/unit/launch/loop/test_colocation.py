"""rollout.colocate without a GPU: the config's refusals, the shared placement-group bundles,
the engines' sleep/wake turns around a push, the learner's optimiser-state offload, and the
fixed fleet size. The run itself is in tests/integration/test_modes.py (mbpp) and
test_train_e2e.py."""

from __future__ import annotations

import json

import pytest
import torch

from common.config import Config, ConfigError, LossConfig, load_config
from launch.loop.control import ControlFile, request_resize
from learner.learner import Learner
from learner.offload import OptimizerOffload
from tests.unit.learner.helpers import learner_config, tiny_samples

COLOCATE = ["--rollout.colocate", "true"]


# ---- config ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--async.max_staleness", "1"], r"rollout.colocate needs async.max_staleness = 0"),
        (["--rollout.num_actors", "2"], r"rollout.num_actors \(2\) must equal learner.num_ranks"),
        (["--rollout.num_gpus", "0.5"], r"learner.num_gpus \(0\) and rollout.num_gpus \(0.5\)"),
        (
            ["--rollout.num_gpus", "0.6", "--learner.num_gpus", "0.5"],
            r"learner.num_gpus \(0.5\) \+ rollout.num_gpus \(0.6\) must be at most 1",
        ),
        (
            ["--rollout.num_cpus", "0", "--learner.num_cpus", "0"],
            "a bundle cannot be empty",
        ),
        (
            ["--rollout.sleep_level", "2", "--learner.lora.enabled", "true",
             "--learner.lora.export", "adapter"],
            r"sleep_level = 2 discards the engine's weights",
        ),
    ],
)  # fmt: skip
def test_colocation_refuses_what_cannot_work(args, said):
    with pytest.raises(ConfigError, match=said):
        load_config(None, [*COLOCATE, *args])


def test_offloading_the_optimiser_needs_colocation():
    with pytest.raises(ConfigError, match=r"learner.offload_optimizer = 'while_generating' needs"):
        load_config(None, ["--learner.offload_optimizer", "while_generating"])
    config = load_config(None, [*COLOCATE, "--learner.offload_optimizer", "while_generating"])
    assert config.learner.offload_optimizer == "while_generating"


def test_a_colocated_gpu_pair_and_its_keys_parse():
    config = load_config(
        None,
        [*COLOCATE, "--rollout.num_gpus", "0.4", "--learner.num_gpus", "0.6",
         "--rollout.sleep_level", "2", "--learner.num_ranks", "2", "--rollout.num_actors", "2"],
    )  # fmt: skip
    assert (config.rollout.colocate, config.rollout.sleep_level) == (True, 2)


# ---- placement ---------------------------------------------------------------------------


def _placement(monkeypatch, config: Config):
    """``Placement.create`` with Ray's placement group replaced by a record of its bundles."""
    from launch.fleet import actors

    made = {}

    class Group:
        def ready(self):
            return None

    def placement_group(bundles, strategy):
        made.update(bundles=bundles, strategy=strategy)
        return Group()

    monkeypatch.setattr(actors, "placement_group", placement_group)
    monkeypatch.setattr(actors.ray, "get", lambda *args, **kwargs: None)
    return actors.Placement.create(config, "r"), made


def test_each_engine_shares_a_bundle_with_its_learner_rank(monkeypatch):
    config = load_config(
        None,
        [*COLOCATE, "--learner.num_ranks", "2", "--rollout.num_actors", "2",
         "--learner.num_cpus", "1", "--rollout.num_cpus", "0.5",
         "--learner.num_gpus", "0.6", "--rollout.num_gpus", "0.3"],
    )  # fmt: skip
    placement, made = _placement(monkeypatch, config)
    assert made["bundles"] == [{"CPU": 1.5, "GPU": 1.0}, {"CPU": 1.5, "GPU": 1.0}]
    assert made["strategy"] == "PACK"  # ray.placement = "none" packs a colocated run
    assert placement.bundle_of == {
        "learner-r": 0, "rollout-r-0": 0, "learner-r-1": 1, "rollout-r-1": 1,
    }  # fmt: skip


def test_a_colocated_cpu_run_gets_a_group_of_one_bundle(monkeypatch):
    config = load_config(None, [*COLOCATE, "--rollout.num_cpus", "0.5"])
    placement, made = _placement(monkeypatch, config)
    assert made["bundles"] == [{"CPU": 1.5}]
    assert placement.bundle_of == {"learner-r": 0, "rollout-r-0": 0}


def test_without_colocation_placement_is_as_before(monkeypatch):
    config = load_config(None, ["--ray.placement", "spread", "--rollout.num_actors", "2"])
    placement, made = _placement(monkeypatch, config)
    assert made["bundles"] == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    assert made["strategy"] == "SPREAD"
    assert placement.bundle_of == {"learner-r": 0, "rollout-r-0": 1, "rollout-r-1": 2}


# ---- resizing ----------------------------------------------------------------------------


def test_a_colocated_run_refuses_another_fleet_size(tmp_path, capsys):
    (tmp_path / "config.toml").write_text(load_config(None, COLOCATE).to_toml())
    with pytest.raises(ValueError, match=r"colocates its 1 engine\(s\) .* cannot resize to 2"):
        request_resize(tmp_path, 2)
    request_resize(tmp_path, 1)  # its own size is no change
    control = ControlFile(tmp_path / "control.json", fixed_size=1)
    (tmp_path / "control.json").write_text(json.dumps({"rollout_actors": 3}))
    assert control.poll() is None
    assert "cannot resize to 3" in capsys.readouterr().err


# ---- engines: sleep and wake around a push -------------------------------------------------


class _FakeLLM:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags):
        self.calls.append(("wake_up", tags))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


class _FakeReceiver:
    name = "cpu_safetensors"

    def receive(self, llm, update):
        llm.calls.append(("load", update.version))
        return {}


def _worker(calls: list):
    from actor.rollout_worker import RolloutWorker

    worker = RolloutWorker.__new__(RolloutWorker)  # no engine: its calls are recorded
    worker.llm, worker.receiver, worker.worker_index = _FakeLLM(calls), _FakeReceiver(), 0
    worker.weight_version, worker._asleep, worker._discarded = 3, set(), False
    return worker


def _update(version: int):
    from common.types import WeightUpdate

    return WeightUpdate(version=version, transport="cpu_safetensors", payload=None)


def test_a_sleeping_engine_takes_an_update_only_once_its_weights_woke():
    calls: list = []
    worker = _worker(calls)
    worker.sleep(2)
    with pytest.raises(RuntimeError, match="must reach awake weights"):
        worker.update_weights(_update(4))
    with pytest.raises(RuntimeError, match="is asleep"):
        next(worker.generate_stream([]))
    worker.wake(["weights"])
    worker.update_weights(_update(4))
    worker.wake(["kv_cache"])
    assert worker.wake(None) == 0.0  # awake: nothing to do (a restarted actor, too)
    assert calls == [
        ("sleep", 2), ("wake_up", ["weights"]), ("load", 4), ("reset_prefix_cache",),
        ("wake_up", ["kv_cache"]),
    ]  # fmt: skip
    assert worker.weight_version == 4


def test_waking_from_level_2_without_an_update_serves_no_version():
    worker = _worker([])
    worker.sleep(2)
    worker.wake(None)
    assert worker.weight_version == -1  # below every fleet's: the fleet reloads it first
    worker = _worker([])
    worker.sleep(1)
    worker.wake(None)
    assert worker.weight_version == 3  # level 1 kept the weights


class _Ref:
    def __init__(self, value) -> None:
        self.value = value


class _Method:
    def __init__(self, log: list, index: int, name: str, answer) -> None:
        self.log, self.index, self.name, self.answer = log, index, name, answer

    def remote(self, *args):
        self.log.append((self.index, self.name, *args))
        return _Ref(self.answer)


class _FakeActor:
    def __init__(self, log: list, index: int) -> None:
        self.sleep = _Method(log, index, "sleep", 0.5)
        self.wake = _Method(log, index, "wake", 0.25)
        self.update_weights = _Method(log, index, "update_weights", {"version": 1.0, "seconds": 0})


def test_a_push_wakes_every_engine_around_its_load(monkeypatch):
    from launch.fleet import rollout_fleet

    monkeypatch.setattr(rollout_fleet.ray, "get", lambda ref, **kwargs: ref.value)
    fleet = rollout_fleet.RolloutFleet(load_config(None, COLOCATE), "model", "r")
    log: list = []
    fleet.actors = [_FakeActor(log, 0), _FakeActor(log, 1)]
    assert fleet.sleep(2) == 0.5
    fleet.finish_push(fleet.start_push("update"))
    assert log == [
        (0, "sleep", 2), (1, "sleep", 2),
        (0, "wake", ["weights"]), (0, "update_weights", "update"), (0, "wake", ["kv_cache"]),
        (1, "wake", ["weights"]), (1, "update_weights", "update"), (1, "wake", ["kv_cache"]),
    ]  # fmt: skip
    assert (fleet.asleep, fleet.wake_s, fleet.sleeps, fleet.wakes) == (False, 0.5, 1, 1)
    log.clear()
    fleet.finish_push(fleet.start_push("next"))  # awake: a plain push
    assert log == [(0, "update_weights", "next"), (1, "update_weights", "next")]


# ---- the step's turns --------------------------------------------------------------------


class _Turns:
    """A fleet whose calls land in one log."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.rollout = self
        self.learner = self
        self.wake_s, self.sleeps, self.wakes = 0.75, 0, 0

    def sleep(self, level):
        self.log.append(f"sleep {level}")
        self.sleeps += 1
        return 0.5

    def reload_optimizer(self):
        self.log.append("reload")
        return 0.125

    def offload_optimizer(self):
        self.log.append("offload")
        return 0.25

    def release_memory(self):
        self.log.append("release")
        return 0.0625


@pytest.mark.parametrize("offload", ["never", "while_generating"])
def test_the_learner_gets_the_card_between_sleep_and_offload(offload):
    from launch.loop.colocation import Colocation

    config = load_config(
        None, [*COLOCATE, "--rollout.sleep_level", "2", "--learner.offload_optimizer", offload]
    )
    fleet = _Turns()
    colocation = Colocation.of(config, fleet)
    colocation.before_train()
    colocation.after_train()
    fleet.wakes += 1  # the push's
    metrics = colocation.metrics()
    moves = offload == "while_generating"
    # without the offload the step's cached blocks are handed back all the same
    assert fleet.log == ["sleep 2", *(["reload", "offload"] if moves else ["release"])]
    expected = {"colocate/sleep_s": 0.5, "colocate/wake_s": 0.75, "colocate/sleeps": 1.0,
                "colocate/wakes": 1.0}  # fmt: skip
    if moves:
        expected.update({"colocate/reload_s": 0.125, "colocate/offload_s": 0.25})
    else:
        expected["colocate/release_s"] = 0.0625
    assert metrics == expected
    assert colocation.metrics() == {"colocate/sleeps": 1.0, "colocate/wakes": 1.0}
    assert Colocation.of(load_config(None, []), fleet) is None


# ---- the learner's optimiser state ---------------------------------------------------------


def _params(learner: Learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()}


def test_offload_and_reload_leave_the_next_step_bit_identical(tied_model):
    plain = Learner(tied_model, learner_config(), loss=LossConfig(beta=0.05))
    moved = Learner(tied_model, learner_config(), loss=LossConfig(beta=0.05))
    for step in range(3):
        samples = tiny_samples(seed=step)
        plain.train_step(samples)
        moved.reload_optimizer()
        moved.train_step(samples)
        assert moved.offload_optimizer() >= 0.0
        assert moved.optimizer.state  # AdamW's moments survive the trip
    after_plain, after_moved = _params(plain), _params(moved)
    for name, value in after_plain.items():
        assert torch.equal(value, after_moved[name]), name


def test_offload_moves_state_off_the_device_and_back_to_where_it_was():
    # The CPU learner's state is already in host memory: nothing moves, nothing is lost.
    param = torch.nn.Parameter(torch.ones(4))
    optimizer = torch.optim.AdamW([param])
    param.grad = torch.ones(4)
    optimizer.step()
    state = dict(optimizer.state[param])
    offload = OptimizerOffload(optimizer)
    assert offload.offload()["bytes"] == 0.0 and not offload.offloaded
    offload.reload()
    for key, value in optimizer.state[param].items():
        assert value is state[key], key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_offload_frees_the_device_memory_of_the_state():  # pragma: no cover (no GPU in CI)
    param = torch.nn.Parameter(torch.ones(1 << 20, device="cuda"))
    optimizer = torch.optim.AdamW([param])
    param.grad = torch.ones_like(param)
    optimizer.step()
    before = {k: v.clone() for k, v in optimizer.state[param].items()}
    offload = OptimizerOffload(optimizer)
    used = torch.cuda.memory_allocated()
    moved = offload.offload()
    assert moved["bytes"] == 2 * 4 * (1 << 20)  # exp_avg and exp_avg_sq
    assert torch.cuda.memory_allocated() == used - moved["bytes"]
    assert optimizer.state[param]["exp_avg"].is_pinned()
    offload.reload()
    for key, value in optimizer.state[param].items():
        assert value.device == before[key].device and torch.equal(value, before[key]), key


def test_an_engine_asks_vllm_to_find_free_only_what_it_needs():
    from actor.rollout_worker import engine_share

    gib = 1 << 30
    # the 1.5B one-GPU plan: 20.4 GiB awake on 79.1, beside a learner holding 23.5 between steps
    share = engine_share(int(20.4 * gib), int(79.1 * gib), 0.5)
    assert share == pytest.approx(20.4 / 79.1 + 0.02, abs=1e-4)
    assert share * 79.1 <= 79.1 - 23.5  # a restarted engine starts beside the learner's state
    assert engine_share(int(60 * gib), int(79.1 * gib), 0.5) == 0.5  # never past its fraction
