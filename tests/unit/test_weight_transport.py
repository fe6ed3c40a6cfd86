"""Bucketed weight updates: bounded, complete, in order, and decoded to the same tensors."""

from __future__ import annotations

import pytest
import torch

from common.weight_transport import (
    CpuSafetensorsSender,
    decode_bucket,
    decode_update,
    make_sender,
    split_buckets,
)


def _tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    shapes = {"embed": (64, 32), "layer0.q": (32, 32), "layer0.k": (8, 32), "big": (256, 64)}
    shapes |= {"layer1.q": (32, 32), "norm": (32,)}
    return {name: torch.randn(shape).to(torch.bfloat16) for name, shape in shapes.items()}


def _nbytes(bucket: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in bucket.values())


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
    update = CpuSafetensorsSender(bucket_bytes=4096).send(tensors, version=3)
    assert update.version == 3 and len(update.payload) == len(split_buckets(tensors, 4096))
    assert update.num_bytes == sum(len(blob) for blob in update.payload)
    decoded = dict(decode_update(update))
    assert sorted(decoded) == sorted(tensors)  # safetensors orders names inside a bucket
    for name, tensor in tensors.items():
        assert torch.equal(decoded[name], tensor)
    first = decode_bucket(update.transport, memoryview(update.payload[0]))  # as RPC may hand it
    assert {name for name, _ in first} == set(split_buckets(tensors, 4096)[0])


def test_bad_transport_and_bucket_size_are_refused():
    with pytest.raises(ValueError, match="unknown weight transport 'nccl'"):
        make_sender("nccl")
    with pytest.raises(ValueError, match="bucket size must be positive"):
        make_sender("cpu_safetensors", 0)
    with pytest.raises(ValueError, match="cannot receive transport 'lora_adapter'"):
        decode_bucket("lora_adapter", b"")
