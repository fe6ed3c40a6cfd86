"""Weight transports: bucketed updates are bounded, complete, in order and decode to the same
tensors; the adapter transport ships its files, one directory per version on each side; each
transport is a pair."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actor.receivers import make_receiver
from common.config import LoraConfig
from common.transport import transport_for
from common.transport.cpu_safetensors import decode_bucket, decode_update, split_buckets
from common.types import WeightUpdate
from learner.senders import CpuSafetensorsSender, make_sender


def _tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    shapes = {"embed": (64, 32), "layer0.q": (32, 32), "layer0.k": (8, 32), "big": (256, 64)}
    shapes |= {"layer1.q": (32, 32), "norm": (32,)}
    return {name: torch.randn(shape).to(torch.bfloat16) for name, shape in shapes.items()}


def _nbytes(bucket: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in bucket.values())


class _Source:
    """A ``WeightSource`` of fixed tensors and a fake adapter (one file whose bytes name it)."""

    def __init__(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        self.tensors, self.weight_version = tensors, version

    def export_tensors(self) -> dict[str, torch.Tensor]:
        return self.tensors

    def save_adapter(self, directory: str) -> None:
        from pathlib import Path

        Path(directory).mkdir(parents=True)
        (Path(directory) / "adapter_model.safetensors").write_text(f"v{self.weight_version}")


def test_buckets_are_bounded_ordered_and_complete():
    tensors = _tensors()
    limit = 4096
    buckets = split_buckets(tensors, limit)
    assert [name for bucket in buckets for name in bucket] == list(tensors)
    for bucket in buckets:  # only a tensor bigger than a bucket may exceed it, alone
        assert _nbytes(bucket) <= limit or len(bucket) == 1
    assert {"big"} in [set(bucket) for bucket in buckets]
    assert len(buckets) > 2


def test_one_bucket_when_everything_fits():
    tensors = _tensors()
    assert split_buckets(tensors, 1 << 30) == [tensors]


def test_update_decodes_to_the_same_tensors_bucket_by_bucket():
    tensors = _tensors()
    update = make_sender("cpu_safetensors", bucket_bytes=4096).send(_Source(tensors, 3))
    assert update.version == 3 and len(update.payload) == len(split_buckets(tensors, 4096))
    assert update.num_bytes == sum(len(blob) for blob in update.payload)
    decoded = dict(decode_update(update))
    assert sorted(decoded) == sorted(tensors)  # safetensors orders names inside a bucket
    for name, tensor in tensors.items():
        assert torch.equal(decoded[name], tensor)
    first = decode_bucket(memoryview(update.payload[0]))  # as RPC may hand it
    assert {name for name, _ in first} == set(split_buckets(tensors, 4096)[0])


def test_adapter_sender_writes_one_directory_per_version_and_keeps_two(tmp_path):
    sender = make_sender("lora_adapter", adapter_dir=str(tmp_path))
    updates = [sender.send(_Source({}, version)) for version in range(4)]
    # the files travel, not a path: no file system need be shared with the engines
    assert [u.payload for u in updates] == [
        {"adapter_model.safetensors": f"v{v}".encode()} for v in range(4)
    ]
    assert all(u.transport == "lora_adapter" and u.num_bytes == 2 for u in updates)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000002", "v000003"]
    assert (tmp_path / "v000003" / "adapter_model.safetensors").read_text() == "v3"


def test_adapter_receiver_serves_each_version_from_its_own_disk(tmp_path):
    receiver = make_receiver("lora_adapter")
    assert receiver.adapter() is None  # the base model until the first update
    for version in range(3, 6):
        files = {"adapter_model.safetensors": f"v{version}".encode(), "../escape": b"x"}
        receiver.receive(None, WeightUpdate(version, "lora_adapter", files, num_bytes=2))
    adapter = receiver.adapter()
    assert (adapter.lora_name, adapter.lora_int_id) == ("v5", 6)
    served = Path(adapter.lora_path)
    assert (served / "adapter_model.safetensors").read_text() == "v5"
    assert sorted(p.name for p in served.iterdir()) == ["adapter_model.safetensors", "escape"]
    # this version and the one before it (a request may still read it); older ones gone
    assert sorted(p.name for p in served.parent.iterdir()) == ["v000004", "v000005"]
    assert make_receiver("cpu_safetensors").adapter() is None


def test_every_transport_is_a_pair_with_one_name():
    for name in ("cpu_safetensors", "lora_adapter"):
        assert make_sender(name).name == make_receiver(name).name == name


def test_the_run_uses_the_adapter_transport_only_when_lora_exports_adapters():
    adapter = LoraConfig(enabled=True, export="adapter")
    merged = LoraConfig(enabled=True, export="merged")
    assert transport_for("cpu_safetensors", adapter) == "lora_adapter"
    assert transport_for("cpu_safetensors", merged) == "cpu_safetensors"
    off = LoraConfig(enabled=False, export="adapter")
    assert transport_for("cpu_safetensors", off) == "cpu_safetensors"


def test_bad_transport_and_bucket_size_are_refused():
    with pytest.raises(ValueError, match="unknown weight transport 'nccl'"):
        make_sender("nccl")
    with pytest.raises(ValueError, match="unknown weight transport 'nccl'"):
        make_receiver("nccl")
    with pytest.raises(ValueError, match="bucket size must be positive"):
        make_sender("cpu_safetensors", bucket_bytes=0)
    adapter = WeightUpdate(1, "lora_adapter", "/adapters/v000001", num_bytes=1)
    with pytest.raises(ValueError, match="not a cpu_safetensors update: 'lora_adapter'"):
        list(decode_update(adapter))
    assert CpuSafetensorsSender.name == "cpu_safetensors"


def test_adapter_sender_clears_newer_versions_a_resumed_run_left(tmp_path):
    for stale in ("v000014", "v000015", "v000010"):  # an interrupted run got further
        (tmp_path / stale).mkdir()
        (tmp_path / stale / "adapter_model.safetensors").write_text("old")
    sender = make_sender("lora_adapter", adapter_dir=str(tmp_path))
    update = sender.send(_Source({}, 10))  # resumed at the checkpoint of version 10
    assert update.payload == {"adapter_model.safetensors": b"v10"}
    assert (tmp_path / "v000010" / "adapter_model.safetensors").read_text() == "v10"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000010"]


class _BreakingGroup:
    """A group whose broadcast fails from the ``fails_at``-th call on, as gloo's does once a
    member died (a stand-in: the real group is tested in tests/integration/test_fleet_push)."""

    def __init__(self, fails_at: int) -> None:
        self.fails_at, self.calls = fails_at, 0

    def broadcast(self, tensor, root):
        self.calls += 1
        if self.calls >= self.fails_at:
            raise RuntimeError("Connection closed by peer")
        return self

    def wait(self) -> None:
        return None


class _CountingSource:
    """Tensors whose iteration is counted: each stands for a gather every rank takes part in."""

    def __init__(self, count: int) -> None:
        from vllm.distributed.weight_transfer.base import ParamMeta

        self.tensors = [(f"w{i}", torch.ones(64)) for i in range(count)]
        self._meta = [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors]
        self.walked = 0

    def metadata(self):
        return self._meta

    def __iter__(self):
        for pair in self.tensors:
            self.walked += 1
            yield pair


def test_a_failed_broadcast_finishes_the_walk_closes_the_group_and_raises(monkeypatch):
    """Rank 0 walks every tensor after its broadcast failed (the other learner ranks gather
    with it), closes the group at once (engines waiting in the broadcast end), then raises."""
    from learner import collective_sender as collective

    closed = []
    monkeypatch.setattr(
        collective.GlooTrainerWeightTransferEngine, "close", lambda self: closed.append(1)
    )
    source = _CountingSource(10)
    engine = collective.GlooTrainerWeightTransferEngine(
        client=collective.DriverPaced(), source=source, is_sender=True
    )
    engine.bucket_bytes = 64 * 4  # one tensor per bucket: ten broadcasts
    engine.group = _BreakingGroup(fails_at=3)
    with pytest.raises(RuntimeError, match="the broadcast to the engines failed"):
        engine.send_weights()
    assert source.walked == 10 and engine.group.calls == 3 and closed == [1]
