"""``python -m learner.bench`` runs real learner steps on a random model built from a preset."""

from __future__ import annotations

import json

from learner.bench.step import PRESETS, main, random_batch


def test_random_batch_has_the_rollout_shape():
    samples = random_batch(prompts=3, group=4, prompt_len=5, completion_len=7, vocab=50)
    assert len(samples) == 12
    assert {len(s.completion_token_ids) for s in samples} == {7}
    assert {s.group_index for s in samples} == {0, 1, 2}
    assert [s.advantage for s in samples[:4]] == [1.0, -1.0, 1.0, -1.0]
    assert all(0 <= t < 50 for s in samples for t in s.prompt_token_ids + s.completion_token_ids)


def test_presets_match_the_public_shapes():
    qwen = PRESETS["qwen2.5-1.5b"]
    assert (qwen["hidden_size"], qwen["num_hidden_layers"], qwen["vocab_size"]) == (
        1536,
        28,
        151936,
    )


def test_bench_reports_step_time_throughput_and_memory(tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = ["--preset", "tiny", "--prompts", "2", "--group", "2", "--prompt-len", "4",
            "--completion-len", "8", "--steps", "1", "--warmup", "0", "--lora",
            "--learner.lora.rank", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["samples"] == 4 and result["completion_tokens"] == 32
    assert result["step_s"] > 0 and result["tokens_per_s"] > 0
    assert result["peak_memory_gib"] > 0
    # LoRA from the flag, rank from the override: only the adapter trains
    assert result["learner"]["lora"]["rank"] == 4
    assert 0 < result["trainable_parameters"] < result["parameters"]
    assert json.loads(capsys.readouterr().out) == result


def test_bad_learner_override_is_a_clean_error(capsys):
    assert main(["--preset", "tiny", "--learner.no_such_key", "1"]) == 2
    assert "learner.no_such_key" in capsys.readouterr().err
