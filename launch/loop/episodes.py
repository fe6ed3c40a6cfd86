"""Multi-turn episodes: a failing program's test feedback goes back to the model, which tries again
(docs/episodes.md).

With ``episode.max_turns = T > 1`` a program that fails gets feedback on its first failing test,
and the model writes the next turn, until it passes, the sandbox fails, T turns, or the next turn
would not fit in ``model.max_model_len``. All running episodes advance together, one batched
generation and one sandbox call per turn. What the learner sees of a two-turn episode
(``Completion.loss_mask``)::

    prompt | turn 1 (trained) | feedback (masked) | turn 2 (trained)

Token ids are kept as generated and the feedback is tokenised on its own, so the learner scores
exactly the sequence the engine sampled from. The feedback quotes what the program did, which
the policy wrote and so may contain anything: control characters are stripped, and the message
is tokenised with special-token parsing off and never rendered through the chat template, so a
program that prints ``<|im_start|>`` cannot open a turn.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tokenizers import Tokenizer

from common.config import Config, EpisodeConfig
from common.prompts import build_program, continues_prefix, special_strings
from common.types import (
    Completion,
    ExecutionJob,
    ExecutionResult,
    Problem,
    RolloutRequest,
    Verdict,
)
from launch.data.problems import rendered_template

_TEST_PREFIX = re.compile(r"^test \d+: ")
#: Stand-ins rendered through a chat template to find what it writes around a user turn.
_TURN, _MESSAGE = "@@assistant-turn@@", "@@feedback-message@@"


def feedback_message(
    problem: Problem, result: ExecutionResult, max_chars: int, show_tests: bool = False
) -> str:
    """What the sandbox says about a failing program, in words: what went wrong (the error, or
    the value the program computed) and the first failing test (the first test when the program
    did not even load)."""
    reason = _TEST_PREFIX.sub("", printable(result.detail)) or f"the test {result.verdict.value}"
    failed = next((i for i, v in enumerate(result.test_verdicts) if v is not Verdict.PASSED), None)
    if failed is None:  # the program did not load: no test could pass, the first failed
        failed = 0
    message = f"Error: {_cap(reason, max_chars)}"
    if failed < len(problem.tests):  # the test last: what the next turn needs sits closest
        message += f"\nFailed test: {_cap(problem.tests[failed], max_chars)}"
    if show_tests:
        message += "\nThe tests:\n" + "\n".join(problem.tests)
    return printable(message)


def printable(text: str) -> str:
    """``text`` without control characters (newline and tab kept) and lone surrogates: a
    program's output may hold terminal escapes or NUL bytes, which have no place in a prompt,
    and a lone surrogate, which no tokenizer can encode."""
    return "".join(
        ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cs")
    )


def _cap(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line: feedback lines are comments in plain prompts
    return text if len(text) <= limit else text[: limit - 3] + "..."


class FeedbackWriter:
    """Renders feedback between two turns under the run's template and tokenises it."""

    def __init__(self, episode: EpisodeConfig, template: str, tokenizer) -> None:
        self.episode = episode
        self.tokenizer = tokenizer
        self._chat = _chat_frame(tokenizer) if template == "chat" else None
        self._special = special_strings(tokenizer)
        self._plain_ids = plain_text_encoder(tokenizer)

    def pieces(self, problem: Problem, turn: Completion, message: str) -> list[tuple[str, bool]]:
        """The text after ``turn`` and before the model's next turn, in pieces: (text, whether
        it is the chat template's markup, whose special tokens are meant)."""
        if self._chat is not None:
            before, after = self._chat
            last = self.tokenizer.convert_ids_to_tokens(turn.token_ids[-1:])
            if last and last[0] in self._special and before.startswith(last[0]):
                before = before[len(last[0]) :]  # the model closed its turn itself
            return [(before, True), (message, False), (after, True)]
        newline = "" if turn.text.endswith("\n") else "\n"
        if continues_prefix(problem):  # comments, then the program's header again
            comments = "".join(f"# {line}\n" for line in message.splitlines())
            return [(newline + comments + problem.program_prefix, False)]
        return [(f"{newline}\n{message}\nWrite the corrected program.\n\n```python\n", False)]

    def feedback(
        self, problem: Problem, turn: Completion, result: ExecutionResult
    ) -> tuple[str, list[int]]:
        """The feedback on ``turn``'s verdict ``result``: its text and its token ids (special
        tokens only where the chat template put them)."""
        episode = self.episode
        message = feedback_message(problem, result, episode.feedback_chars, episode.show_tests)
        pieces = self.pieces(problem, turn, message)
        ids = []
        for text, markup in pieces:
            if markup:
                ids += self.tokenizer(text, add_special_tokens=False)["input_ids"]
            else:
                ids += self._plain_ids(text)
        return "".join(text for text, _ in pieces), ids


def plain_text_encoder(tokenizer) -> Callable[[str], list[int]]:
    """A function giving the token ids of text read as plain text: a special token's string in
    it (``<|im_start|>``) becomes the ordinary tokens that spell it, never the special token.

    A fast tokenizer gets a private copy of its backend with special-token parsing off for
    good: transformers' ``split_special_tokens=True`` switches a flag on the shared backend for
    the call, which another thread's call could switch back in between.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (Python) tokenizer: the option is read per call
        return lambda text: list(
            tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        )

    plain = Tokenizer.from_str(backend.to_str())
    plain.encode_special_tokens = True
    plain.no_truncation()
    plain.no_padding()
    return lambda text: plain.encode(text, add_special_tokens=False).ids


def _chat_frame(tokenizer) -> tuple[str, str]:
    """(before, after): the chat template's text from the end of an assistant turn to a user
    message, and from that message to the next assistant turn's first token."""
    conversation = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": _TURN},
        {"role": "user", "content": _MESSAGE},
    ]
    text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    before, after = text.split(_TURN, 1)[1].split(_MESSAGE, 1)
    return before, after


def feedback_template(config: Config, tokenizer) -> str:
    """``chat`` or ``plain``: ``episode.template``, or with ``auto`` the prompts' own."""
    if config.episode.template != "auto":
        return config.episode.template
    return rendered_template(config.data, tokenizer)


def append_turn(
    episode: Completion, feedback: Sequence[int], turn: Completion, text: str
) -> Completion:
    """The episode with ``feedback`` (masked, sampler logprob 0) and then ``turn`` (trained)."""
    mask = episode.loss_mask or [1] * len(episode.token_ids)
    return replace(
        episode,
        token_ids=[*episode.token_ids, *feedback, *turn.token_ids],
        sampler_logprobs=[
            *episode.sampler_logprobs,
            *[0.0] * len(feedback),
            *turn.sampler_logprobs,
        ],
        loss_mask=[*mask, *[0] * len(feedback), *[1] * len(turn.token_ids)],
        text=episode.text + text + turn.text,
        finish_reason=turn.finish_reason,
        weight_version=min(episode.weight_version, turn.weight_version),
        turns=episode.turns + 1,
    )


@dataclass
class Episode:
    """One sample's episode so far: its transcript, and the last turn's program and verdict."""

    problem: Problem
    transcript: Completion
    last_turn: Completion
    program: str
    result: ExecutionResult

    @property
    def running(self) -> bool:
        """Another turn can help: the program failed and the sandbox judged it."""
        return not self.result.passed and self.result.verdict is not Verdict.INFRA_ERROR


class EpisodeRunner:
    """Runs turns 2..T of a batch of episodes (see the module docstring).

    ``generate(requests)`` is the rollout fleet's, ``execute(jobs)`` the sandbox's (results in
    job order, stopping at the first failure or not as the reward needs).
    """

    def __init__(
        self,
        config: Config,
        tokenizer,
        generate: Callable[[list[RolloutRequest]], list[Completion]],
        execute: Callable[[list[ExecutionJob]], list[ExecutionResult]],
    ) -> None:
        self.config = config
        self.writer = FeedbackWriter(
            config.episode, feedback_template(config, tokenizer), tokenizer
        )
        self.generate = generate
        self.execute = execute

    def run(self, tag: str, episodes: list[Episode]) -> list[Episode]:
        """Advance ``episodes`` (their first turn judged) turn by turn until each has ended."""
        max_len = self.config.model.max_model_len
        max_new = self.config.rollout.max_new_tokens
        for turn in range(2, self.config.episode.max_turns + 1):
            rng = random.Random(f"{self.config.run.seed}/rollout/{tag}/turn{turn}")
            requests, waiting, feedback = [], [], []
            for k, episode in enumerate(episodes):
                if not episode.running:
                    continue
                text, tokens = self.writer.feedback(
                    episode.problem, episode.last_turn, episode.result
                )
                context = [*episode.transcript.prompt_token_ids, *episode.transcript.token_ids]
                if len(context) + len(tokens) + max_new > max_len:
                    continue  # no room for another turn: the episode ends with this verdict
                seed = rng.getrandbits(31)
                requests.append(
                    RolloutRequest(
                        f"{tag}/turn{turn}/{k}",
                        tuple(context + tokens),
                        (seed,),
                        episode.transcript.temperature,
                    )
                )
                waiting.append(k)
                feedback.append((text, tokens))
            if not requests:
                break
            by_id = {c.request_id: c for c in self.generate(requests)}
            turns = [by_id[r.request_id] for r in requests]
            programs = [build_program(episodes[k].problem, t.text) for k, t in zip(waiting, turns)]
            jobs = [
                episodes[k].problem.job(code) for k, code in zip(waiting, programs, strict=True)
            ]
            results = self.execute(jobs)
            for k, (text, tokens), new, code, result in zip(
                waiting, feedback, turns, programs, results, strict=True
            ):
                episode = episodes[k]
                episodes[k] = Episode(
                    episode.problem,
                    append_turn(episode.transcript, tokens, new, text),
                    new,
                    code,
                    result,
                )
        return episodes


def episode_metrics(
    episodes: Sequence[tuple[Completion, ExecutionResult]], max_turns: int
) -> dict[str, float]:
    """``episode/*`` over a step's final transcripts and verdicts: mean turns, the fraction
    solved at each turn, mean feedback tokens per episode."""
    count = max(len(episodes), 1)
    metrics = {
        "episode/turns_mean": sum(c.turns for c, _ in episodes) / count,
        "episode/feedback_tokens_mean": sum(
            len(c.token_ids) - c.num_trained_tokens for c, _ in episodes
        )
        / count,
    }
    for turn in range(1, max_turns + 1):
        solved = sum(1 for c, r in episodes if r.passed and c.turns == turn)
        metrics[f"episode/solved_at_turn/{turn}"] = solved / count
    return metrics
