"""Train an outcome verifier on a run's own rollout records: ``python -m launch.train_verifier``.

    python -m launch.train_verifier --rollouts runs/demo/rollouts --model runs/demo/checkpoint \
        --out runs/demo/verifier

Every record (``launch.rollouts``) is a program the policy wrote with the sandbox's verdict on
it: labels no one had to annotate, from a judge that cannot be fooled. The verifier is a
sequence classifier (``AutoModelForSequenceClassification`` with two labels on the base model:
a fresh score head on its last token's hidden state) trained on ``prompt + completion`` to
predict the verdict (``--target pass``) or the fraction of tests passed (``--target
fraction``, soft labels). It is saved in Hugging Face format with the tokenizer, so the
``scorer`` reward term and ``launch.evaluate --rerank`` load it unchanged (``head =
"classifier"``: its score is P(label 1), the probability the program passes).

Why split by problem: programs for one problem look alike, so a random split would grade the
verifier on problems it trained on. The held-out problems (``--held-out``, a fraction of the
distinct problem ids, chosen by ``--seed``) appear in no training example; accuracy, AUC and a
calibration table are computed on their distinct programs (each program once, however often the
policy wrote it) and printed, and saved with the split in ``verifier.json``.

Texts are tokenised as the scorer does (cut from the left to ``--max-length`` tokens, padded on
the left), so what it learns is what it is later asked. Full fine-tuning by default; with
``--lora-rank`` a LoRA adapter (plus the score head) is trained and merged before saving.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("launch.train_verifier")

#: Calibration bins of the printed table: [0, 0.2), [0.2, 0.4), ... [0.8, 1.0].
BINS = 5


class VerifierError(ValueError):
    """A user mistake: a missing file, no records, too few problems to split."""


# ---- the examples --------------------------------------------------------------------------


def examples_from(rows: Sequence[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    """One example per distinct (problem, prompt + completion), label from its verdict (or its
    fraction of tests passed); rows without a verdict (infra errors) are left out."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        if row.get("verdict") in (None, "infra_error"):
            continue
        text = row["prompt"] + row["completion"]
        passed = row["verdict"] == "passed"
        total = row.get("tests_total") or 0
        fraction = row["tests_passed"] / total if total else float(passed)
        key = (row["problem_id"], text)
        if key not in seen:
            label = float(passed) if target == "pass" else fraction
            seen[key] = {"problem_id": row["problem_id"], "text": text, "label": label,
                         "passed": passed, "count": 0}  # fmt: skip
        seen[key]["count"] += 1
    return list(seen.values())


def split_by_problem(
    problem_ids: Sequence[str], held_out: float, seed: int
) -> tuple[list[str], list[str]]:
    """Training and held-out problem ids, disjoint; at least one of each."""
    problems = sorted(set(problem_ids))
    if len(problems) < 2:
        raise VerifierError(
            f"the records hold {len(problems)} problem(s); a split by problem needs at least 2"
        )
    random.Random(seed).shuffle(problems)
    count = min(max(1, round(held_out * len(problems))), len(problems) - 1)
    return sorted(problems[count:]), sorted(problems[:count])


# ---- the metrics ---------------------------------------------------------------------------


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """Area under the ROC curve: the probability that a random passing program scores above a
    random failing one, ties counting half (Mann-Whitney). NaN without both kinds."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return math.nan
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos_ranks = sum(r for r, p in zip(ranks, positive, strict=True) if p)
    return (pos_ranks - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def calibration(scores: Sequence[float], positive: Sequence[bool]) -> list[dict[str, float]]:
    """Per bin of predicted probability: count, mean prediction and observed pass rate."""
    table = []
    for b in range(BINS):
        low, high = b / BINS, (b + 1) / BINS
        members = [
            (s, p)
            for s, p in zip(scores, positive, strict=True)
            if low <= s < high or (b == BINS - 1 and s == 1.0)
        ]
        if members:
            table.append({
                "low": low,
                "high": high,
                "count": len(members),
                "predicted": sum(s for s, _ in members) / len(members),
                "observed": sum(p for _, p in members) / len(members),
            })  # fmt: skip
    return table


def evaluate_scores(scores: Sequence[float], positive: Sequence[bool]) -> dict[str, Any]:
    correct = sum((s >= 0.5) == p for s, p in zip(scores, positive, strict=True))
    return {
        "examples": len(scores),
        "pass_rate": sum(positive) / max(len(positive), 1),
        "accuracy": correct / max(len(scores), 1),
        "auc": auc(scores, positive),
        "calibration": calibration(scores, positive),
    }


# ---- the model -----------------------------------------------------------------------------


class Verifier:
    """The classifier, its tokenizer and its training loop."""

    def __init__(self, model_path: str, max_length: int, lora_rank: int = 0, seed: int = 0):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch.manual_seed(seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.truncation_side = "left"  # as the scorer: the end must survive
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_length = max_length
        model = AutoModelForSequenceClassification.from_pretrained(
            model_path, num_labels=2, dtype=torch.float32
        )
        model.config.pad_token_id = self.tokenizer.pad_token_id
        if lora_rank:
            from peft import LoraConfig, TaskType, get_peft_model

            lora = LoraConfig(
                task_type=TaskType.SEQ_CLS,
                r=lora_rank,
                lora_alpha=2 * lora_rank,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            )
            model = get_peft_model(model, lora)
        self.model = model

    def _batch(self, texts: Sequence[str]):
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )

    def train(
        self,
        examples: Sequence[dict[str, Any]],
        epochs: int,
        lr: float,
        batch_size: int,
        seed: int,
    ) -> list[float]:
        """Epochs of AdamW on soft two-class cross-entropy; the mean loss of each epoch."""
        import torch

        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=lr)
        rng = random.Random(seed)
        order = list(range(len(examples)))
        losses = []
        self.model.train()
        for epoch in range(epochs):
            rng.shuffle(order)
            total, start = 0.0, time.perf_counter()
            for first in range(0, len(order), batch_size):
                chosen = [examples[i] for i in order[first : first + batch_size]]
                inputs = self._batch([e["text"] for e in chosen])
                labels = torch.tensor([e["label"] for e in chosen], dtype=torch.float32)
                logits = self.model(**inputs).logits.float()  # (B, 2)
                target = torch.stack([1 - labels, labels], dim=1)
                loss = -(target * torch.log_softmax(logits, dim=-1)).sum(dim=1).mean()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                total += loss.item() * len(chosen)
            losses.append(total / max(len(order), 1))
            print(
                f"epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f} "
                f"({time.perf_counter() - start:.1f}s, {len(order)} examples)",
                flush=True,
            )
        return losses

    def scores(self, texts: Sequence[str], batch_size: int = 64) -> list[float]:
        """P(label 1) for each text: what the ``scorer`` term computes."""
        import torch

        self.model.eval()
        out: list[float] = []
        with torch.no_grad():
            for first in range(0, len(texts), batch_size):
                logits = self.model(**self._batch(texts[first : first + batch_size])).logits
                out += torch.softmax(logits.float(), dim=-1)[:, 1].tolist()
        return out

    def save(self, out: Path) -> None:
        model = self.model
        if hasattr(model, "merge_and_unload"):  # LoRA: a plain HF model for the scorer
            model = model.merge_and_unload()
        model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)


# ---- the command ---------------------------------------------------------------------------


def format_report(metrics: dict[str, Any]) -> str:
    lines = [
        f"held-out problems: {metrics['examples']} distinct programs, "
        f"pass rate {metrics['pass_rate']:.3f}",
        f"accuracy {metrics['accuracy']:.3f}  AUC {metrics['auc']:.3f}",
        "calibration (predicted P(pass) -> observed pass rate):",
    ]
    for row in metrics["calibration"]:
        lines.append(
            f"  [{row['low']:.1f}, {row['high']:.1f}): {row['count']:>6} programs, "
            f"predicted {row['predicted']:.3f}, observed {row['observed']:.3f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m launch.train_verifier",
        description="Train an outcome verifier on a run's rollout records.",
    )
    parser.add_argument(
        "--rollouts", nargs="+", required=True, help="a run's rollouts/ directory, or files"
    )
    parser.add_argument("--model", required=True, help="base model (an HF directory)")
    parser.add_argument("--out", required=True, help="where the verifier is saved")
    parser.add_argument(
        "--kind",
        choices=["outcome"],
        default="outcome",
        help="outcome: one score per program (process verifiers are not built yet)",
    )
    parser.add_argument("--target", choices=["pass", "fraction"], default="pass")
    parser.add_argument("--held-out", type=float, default=0.2, help="fraction of the problems")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256, help="tokens, cut from the left")
    parser.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tuning")
    parser.add_argument("--max-examples", type=int, default=0, help="0: all distinct programs")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _read(paths: list[str]) -> list[dict[str, Any]]:
    from launch.rollouts import read_rollouts

    rows: list[dict[str, Any]] = []
    for path in paths:
        if not Path(path).exists():
            raise VerifierError(f"--rollouts: {path} does not exist")
        rows += read_rollouts(path)
    if not rows:
        raise VerifierError(f"--rollouts: no records in {' '.join(paths)}")
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    from common.model_source import locate_model

    if not 0 < args.held_out < 1:
        raise VerifierError(f"--held-out must be between 0 and 1, got {args.held_out}")
    model_path = locate_model(args.model, "--model")
    rows = _read(args.rollouts)
    examples = examples_from(rows, args.target)
    train_ids, held_ids = split_by_problem([e["problem_id"] for e in examples], args.held_out,
                                           args.seed)  # fmt: skip
    held = set(held_ids)
    training = [e for e in examples if e["problem_id"] not in held]
    evaluation = [e for e in examples if e["problem_id"] in held]
    if args.max_examples:
        random.Random(args.seed).shuffle(training)
        training = training[: args.max_examples]
    print(
        f"{len(rows)} records, {len(examples)} distinct programs; training on "
        f"{len(training)} from {len(train_ids)} problems, holding out {len(evaluation)} from "
        f"{len(held_ids)} ({', '.join(held_ids[:5])}{', ...' if len(held_ids) > 5 else ''})",
        flush=True,
    )
    verifier = Verifier(model_path, args.max_length, args.lora_rank, args.seed)
    losses = verifier.train(training, args.epochs, args.lr, args.batch_size, args.seed)
    scores = verifier.scores([e["text"] for e in evaluation])
    metrics = evaluate_scores(scores, [e["passed"] for e in evaluation])
    print(format_report(metrics), flush=True)
    out = Path(args.out)
    verifier.save(out)
    summary = {
        "kind": args.kind,
        "target": args.target,
        "base_model": args.model,
        "train_problems": train_ids,
        "held_out_problems": held_ids,
        "train_examples": len(training),
        "losses": losses,
        "held_out": metrics,
    }
    (out / "verifier.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f'saved to {out} (scorer term: options = {{ path = "{out}" }})')
    return summary


def main(argv: list[str] | None = None) -> int:
    from common.config import ConfigError

    logging.basicConfig(level=logging.WARNING)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (VerifierError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
