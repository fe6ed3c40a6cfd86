"""A tiny, randomly initialised Qwen2 model and a locally trained tokenizer, built offline.

Why it exists: the demo and the tests must run on a fresh 2-core machine with no network, yet go
through the same code paths as a real model (HF ``save_pretrained`` directory, vLLM engine,
tied embeddings like Qwen2.5-0.5B/1.5B, a chat template). The tokenizer is a character-level
BPE over printable ASCII (so any Python source round-trips) with a few merges learnt from code,
which keeps the vocabulary small enough that a random model emits code-like tokens often.
"""

from __future__ import annotations

import string
from pathlib import Path

from launch.data.tasks import synthetic_corpus

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_ALPHABET = sorted(set(string.printable) - set("\x0b\x0c\r"))


def build_tokenizer(vocab_size: int = 128):
    """Train a small BPE tokenizer on a built-in code corpus and wrap it for transformers."""
    # lazy: launch.train imports this module; --help and config errors must not wait for these
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False))
    # Merges never cross a newline and digits stay single tokens, so numbers and line ends are
    # atoms the policy can learn to place; Fuse decodes by plain concatenation.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    tokenizer.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=_ALPHABET,
        show_progress=False,
    )
    tokenizer.train_from_iterator(synthetic_corpus(), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_tiny_model(path: str | Path, max_position_embeddings: int = 1024) -> Path:
    """Write a random Qwen2 model plus tokenizer to ``path`` (idempotent) and return the path.

    ``max_position_embeddings``: the longest context; a contest problem's statement takes
    thousands of the tiny tokenizer's tokens (the weights do not depend on it). ``head_dim`` is
    32 because vLLM's CPU attention backend only supports head sizes in {32, 64, 80, ...}.
    """
    import torch  # lazy: as in build_tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    tokenizer = build_tokenizer()
    hidden_size, head_dim = 128, 32
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=2,
        num_attention_heads=hidden_size // head_dim,
        num_key_value_heads=max(1, hidden_size // head_dim // 2),
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
