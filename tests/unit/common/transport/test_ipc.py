"""The ``ipc`` weight transport, as far as a machine without a GPU can test it: when the config
picks or refuses it, the update the learner's half builds and the copies it keeps, the order of
the engine's half's calls, and that its modules import on CPU. vLLM's CUDA IPC engines
themselves (exporting and opening handles) need a GPU and have not run here."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from actor.receivers import make_receiver
from actor.rollout_worker import engine_backend
from common.config import ConfigError, load_config
from common.transport import TRANSPORTS
from common.transport.ipc import check_update, snapshot, update_bytes
from common.types import WeightUpdate
from learner.senders import make_sender
from tests.conftest import REPO_ROOT

#: One engine and one learner rank sharing one GPU.
COLOCATED = ["--rollout.colocate", "true", "--rollout.num_gpus", "0.5", "--learner.num_gpus", "0.5"]


# -- config: chosen by default where it works, refused in one line where it cannot -------------
def test_colocated_gpu_runs_default_to_ipc():
    assert load_config(None, COLOCATED).weights.transport == "ipc"


def test_the_default_stays_the_object_store_where_ipc_cannot_work():
    cases = {
        "cpu": ["--rollout.colocate", "true"],
        "not colocated": ["--rollout.num_gpus", "1", "--learner.num_gpus", "1"],
        "separate engine": [*COLOCATED, "--rollout.engine_process", "separate"],
        "adapter": [*COLOCATED, "--learner.lora.enabled", "true", "--learner.lora.export",
                    "adapter"],
    }  # fmt: skip
    for case, overrides in cases.items():
        assert load_config(None, overrides).weights.transport == "cpu_safetensors", case
    # Async runs and more engines than learner ranks are not colocated runs at all.
    for refused in (["--async.max_staleness", "1"], ["--rollout.num_actors", "2"]):
        with pytest.raises(ConfigError, match=r"rollout\.colocate"):
            load_config(None, [*COLOCATED, *refused])


def test_a_transport_the_user_chose_is_kept():
    chosen = load_config(None, [*COLOCATED, "--weights.transport", "cpu_safetensors"])
    assert chosen.weights.transport == "cpu_safetensors"


def test_ipc_is_refused_on_cpu():
    with pytest.raises(ConfigError, match=r"needs the engine and the learner on the same GPU: "
                       r"rollout\.num_gpus is 0 and learner\.num_gpus is 0"):  # fmt: skip
        load_config(None, ["--weights.transport", "ipc", "--rollout.colocate", "true"])
    with pytest.raises(ConfigError, match=r"learner\.num_gpus is 0"):
        load_config(
            None,
            ["--weights.transport", "ipc", "--rollout.colocate", "true",
             "--rollout.num_gpus", "1"],
        )  # fmt: skip


def test_ipc_is_refused_when_not_colocated():
    with pytest.raises(ConfigError, match=r"rollout\.colocate is false, so they run on different"):
        load_config(
            None,
            ["--weights.transport", "ipc", "--rollout.num_gpus", "1", "--learner.num_gpus", "1"],
        )


def test_ipc_is_refused_when_an_engine_has_no_learner_rank_on_its_gpu():
    with pytest.raises(ConfigError, match=r"rollout\.num_actors is 2, .* learner\.num_ranks 1"):
        load_config(None, ["--weights.transport", "ipc", *COLOCATED, "--rollout.num_actors", "2"])


def test_ipc_is_refused_in_the_modes_it_does_not_carry():
    ipc = ["--weights.transport", "ipc", *COLOCATED]
    refusals = {
        r"needs async\.max_staleness = 0": ["--async.max_staleness", "1"],
        r"needs rollout\.engine_process = 'actor'": ["--rollout.engine_process", "separate"],
        r"sends merged weights": [
            "--learner.lora.enabled",
            "true",
            "--learner.lora.export",
            "adapter",
        ],
    }
    for message, overrides in refusals.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, [*ipc, *overrides])
    assert load_config(None, ipc).weights.transport == "ipc"


def test_the_saved_config_keeps_the_chosen_transport(tmp_path):
    saved = tmp_path / "config.toml"
    saved.write_text(load_config(None, COLOCATED).to_toml())
    assert 'transport = "ipc"' in saved.read_text()
    assert load_config(saved).weights.transport == "ipc"


# -- the wire format's pure parts ---------------------------------------------------------------
def _payload(gpus_per_tensor: list[list[str]]) -> dict:
    count = len(gpus_per_tensor)
    return {
        "names": [f"w{i}" for i in range(count)],
        "dtype_names": ["bfloat16"] * count,
        "shapes": [[2, 3]] * count,
        "ipc_handles": [{gpu: ("handle",) for gpu in gpus} for gpus in gpus_per_tensor],
    }


@pytest.mark.parametrize("transposed", [False, True])
def test_a_snapshot_shares_no_memory_with_the_parameter_it_copies(transposed):
    weight = torch.arange(6.0).view(2, 3)
    parameter = torch.nn.Parameter(weight.t() if transposed else weight)
    copy = snapshot(parameter)
    assert torch.equal(copy, parameter) and copy.is_contiguous() and not copy.requires_grad
    with torch.no_grad():
        parameter.add_(1)  # the next optimiser step
    assert copy[0, 0] == 0


def test_update_bytes():
    payload = _payload([["gpu-a", "gpu-b"], ["gpu-b", "gpu-a"], ["gpu-b"]])
    assert update_bytes(payload) == 3 * 6 * 2  # three bf16 tensors of 2 x 3


def test_a_malformed_update_is_refused():
    check_update(_payload([["gpu-a"]]))
    short = _payload([["gpu-a"], ["gpu-a"]])
    short["shapes"] = short["shapes"][:1]
    with pytest.raises(ValueError, match="lists of different lengths"):
        check_update(short)
    with pytest.raises(ValueError, match=r"lacks \['ipc_handles'\]"):
        check_update({k: v for k, v in _payload([["a"]]).items() if k != "ipc_handles"})


# -- the two halves -----------------------------------------------------------------------------
def test_ipc_is_a_pair_with_one_name_and_engines_get_vllms_ipc_backend():
    assert "ipc" in TRANSPORTS
    assert make_sender("ipc").name == make_receiver("ipc").name == "ipc"
    assert make_sender("ipc").every_rank_sends
    assert not make_sender("cpu_safetensors").every_rank_sends
    assert engine_backend("ipc", 0.5) == "ipc"
    assert engine_backend("collective", 1) == "nccl"
    assert engine_backend("collective", 0) == "gloo"
    assert engine_backend("cpu_safetensors", 1) is None


class _Learner:
    """What the sender reads: the export's metadata and tensors, and the version."""

    def __init__(self, version: int) -> None:
        self.weight_version = version
        self.parameters = {"embed.weight": torch.ones(4, 2), "norm.weight": torch.ones(2)}

    def export_metadata(self):
        return [(n, t.dtype, tuple(t.shape)) for n, t in self.parameters.items()]

    def iter_export(self):
        return iter(self.parameters.items())  # the parameters themselves, as a same-dtype export


class _TrainerEngine:
    """Stands in for vLLM's CUDA IPC trainer engine (unpacked): walks the source, one handle
    per tensor keyed by a GPU UUID (its data pointer stands for the handle), ships on rank 0."""

    built: ClassVar[list] = []

    def __init__(self, init_info, client, source) -> None:
        self.init_info, self.client, self.source = init_info, client, source

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None):
        cls.built.append(init_info)
        return cls(init_info, client, source)

    def send_weights(self) -> None:
        pairs = list(self.source)
        if self.init_info.rank != 0:
            return
        self.client.start_weight_update()
        self.client.update_weights({
            "names": [name for name, _ in pairs],
            "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in pairs],
            "shapes": [list(t.shape) for _, t in pairs],
            "ipc_handles": [{"gpu-0": (t.data_ptr(),)} for _, t in pairs],
        })  # fmt: skip
        self.client.finish_weight_update()


@pytest.fixture
def stand_in_engine(monkeypatch):
    from learner import ipc_sender

    _TrainerEngine.built = []
    monkeypatch.setattr(ipc_sender, "WeightTransferTrainerFactory", _TrainerEngine)
    return ipc_sender


def test_rank_zero_returns_the_handles_and_keeps_copies_until_the_next_send(stand_in_engine):
    sender = stand_in_engine.IpcSender()
    learner = _Learner(version=3)
    update = sender.send(learner)
    (init_info,) = _TrainerEngine.built
    assert (init_info.rank, init_info.packed) == (0, False)
    assert (update.version, update.transport, update.buckets) == (3, "ipc", 1)
    assert update.payload["names"] == ["embed.weight", "norm.weight"]
    assert update.payload["shapes"] == [[4, 2], [2]]
    assert update.num_bytes == (8 + 2) * 4
    held = sender._held.held
    assert sender.held_tensors == 2
    live = {t.data_ptr() for t in learner.parameters.values()}
    pointed = {handle["gpu-0"][0] for handle in update.payload["ipc_handles"]}
    assert pointed == {t.data_ptr() for t in held} and not pointed & live
    learner.weight_version = 4
    sender.send(learner)
    assert sender.held_tensors == 2 and all(a is not b for a, b in zip(held, sender._held.held))
    sender.release()
    assert sender.held_tensors == 0


def test_the_other_ranks_export_and_keep_their_copies_but_ship_nothing(
    stand_in_engine, monkeypatch
):
    monkeypatch.setattr(stand_in_engine, "learner_rank", lambda: 1)
    sender = stand_in_engine.IpcSender()
    update = sender.send(_Learner(version=2))
    assert update.payload == {} and update.num_bytes == 0
    assert sender.held_tensors == 2  # the engine on this rank's GPU reads them


def test_every_learner_rank_sends_with_ipc_and_only_gathers_otherwise():
    from learner.learner import Learner

    calls = []
    ipc_sender = SimpleNamespace(every_rank_sends=True, gathers=True, send=calls.append)
    follower = SimpleNamespace(ranks=SimpleNamespace(rank=1), sender=ipc_sender)
    assert Learner.export_weights(follower) is None and calls == [follower]
    walked = []
    object_store = SimpleNamespace(every_rank_sends=False, gathers=True, send=calls.append)
    follower = SimpleNamespace(
        ranks=SimpleNamespace(rank=1),
        sender=object_store,
        iter_export=lambda: walked.append(1) or [],
    )
    assert Learner.export_weights(follower) is None and len(calls) == 1 and walked == [1]


class _Engine:
    """Records the weight-transfer calls a receiver makes on its ``vllm.LLM``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, method: str):
        return lambda *args: self.calls.append((method, *args))


def test_the_engine_learns_the_wire_mode_once_then_loads_each_update_in_a_session():
    receiver, engine = make_receiver("ipc"), _Engine()
    payload = _payload([["gpu-0"]])
    for version in (1, 2):
        metrics = receiver.receive(engine, WeightUpdate(version, "ipc", payload, 12, 1))
        assert metrics["load_s"] >= 0
    session = [("start_weight_update",), ("update_weights", {"update_info": payload}),
               ("finish_weight_update",)]  # fmt: skip
    init = ("init_weight_transfer_engine", {"init_info": {"packed": False}})
    assert engine.calls == [init, *session, *session]
    assert receiver.adapter() is None


def test_a_malformed_update_never_reaches_the_engine():
    receiver, engine = make_receiver("ipc"), _Engine()
    with pytest.raises(ValueError, match="lacks"):
        receiver.receive(engine, WeightUpdate(1, "ipc", {"names": []}, 0, 1))
    assert engine.calls == []


def test_the_ipc_modules_import_on_cpu_and_only_the_sender_imports_vllm():
    code = (
        "import sys; import common.transport.ipc, actor.receivers, learner.senders; "
        "assert 'vllm' not in sys.modules, 'vllm imported'; "
        "import learner.ipc_sender; assert not __import__('torch').cuda.is_initialized()"
    )
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_launch_train_refuses_ipc_on_cpu_with_one_error_line_and_status_2(tmp_path, capsys):
    from launch.train import main

    demo = str(REPO_ROOT / "configs" / "demo.toml")
    status = main(
        ["--config", demo, "--weights.transport", "ipc", "--run.output_dir", str(tmp_path)]
    )
    header, *errors = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and header == "error: invalid configuration:" and len(errors) == 1
    assert "weights.transport = 'ipc' needs the engine and the learner on the same GPU" in errors[0]
    assert not any(tmp_path.iterdir())
