"""A completion's text is the decode of the tokens the model sampled, not vLLM's output text,
checked on a stand-in for a finished vLLM request (no engine needed)."""

from __future__ import annotations

from types import SimpleNamespace

from actor.rollout_worker import _to_completion
from common.types import RolloutRequest
from launch.data.tiny_model import build_tokenizer


def _finished(token_ids: list[int], text: str) -> SimpleNamespace:
    """What vLLM hands back for a finished request: one sample with per-token logprobs."""
    logprobs = [{token: SimpleNamespace(logprob=-0.5)} for token in token_ids]
    sample = SimpleNamespace(
        token_ids=token_ids, logprobs=logprobs, text=text, finish_reason="stop"
    )
    return SimpleNamespace(outputs=[sample])


def test_the_text_is_the_decode_of_the_sampled_tokens_not_the_text_cut_at_a_stop_string():
    tokenizer = build_tokenizer()
    tokens = [*tokenizer.encode("3\n#", add_special_tokens=False), tokenizer.eos_token_id]
    # vLLM stopped on "\n" and cut its text there, though the sampled tokens run past it (with
    # a real vocabulary one token "\n#" would): the tokens are what the learner trains on
    output = _finished(tokens, text="3\n")
    request = RolloutRequest("s/0", (1, 2), (7,))
    completion = _to_completion(request, 0, output, 3, tokenizer)
    assert completion.text == "3\n#"  # the EOS, a special token, adds no text
    assert completion.token_ids == tokens
    assert completion.sampler_logprobs == [-0.5] * 4 and completion.weight_version == 3
