"""What the template ending and float32 label mass change on a model: the numbers of docs/reading.md.

For each question, θ_0 of the direct-query prompt and of the PPR prompt (before any answer) under both template
endings (`fence`, the default, and `paper`), computed as the engine's prefill computes it (`AnswerDist.from_logits`
of the prompt's last logits). Prints the L1 distance between the endings (max and mean over questions), how often
the argmax moves, accuracy of the argmax and mean label mass under each ending, and the largest difference between
the label mass accumulated in float32 (the tool) and in float64.

    OMP_NUM_THREADS=1 python bench/readings.py --questions 20 --dtype float32
"""

from __future__ import annotations

import argparse

import torch

from beliefdrift.backend import DEFAULT_MODEL, AnswerDist, AnswerTokens, LanguageModel, load_model
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine.resampling import direct_tokens, ppr_tokens
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, TEMPLATE_ENDINGS


@torch.no_grad()
def last_logits(lm: LanguageModel, tokens: AnswerTokens) -> torch.Tensor:
    """Logits [vocab] of the prompt's last position."""
    ids = torch.tensor([tokens.prompt_ids], device=lm.device)
    return lm.model(input_ids=ids, logits_to_keep=1).logits[0, -1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--template", default=DEFAULT_PPR_TEMPLATE)
    args = parser.parse_args()

    lm = load_model(args.model, dtype=args.dtype)
    questions = load_dataset(args.dataset, n=args.questions, seed=args.seed)
    prompts = {"direct": lambda q, e: direct_tokens(lm, q, e),
               "ppr": lambda q, e: ppr_tokens(lm, q, args.template, ending=e)}
    mass_gap = 0.0
    print(f"{lm.name}, {lm.dtype}, {len(questions)} {args.dataset} questions, PPR template {args.template}")
    print("| prompt | θ_0 L1 fence↔paper: max | mean | argmax moved | acc fence | acc paper | label mass fence "
          "| label mass paper |\n|---|---|---|---|---|---|---|---|")
    for name, tokens_of in prompts.items():
        probs, masses = {e: [] for e in TEMPLATE_ENDINGS}, {e: [] for e in TEMPLATE_ENDINGS}
        for question in questions:
            for ending in TEMPLATE_ENDINGS:
                tokens = tokens_of(question, ending)
                logits = last_logits(lm, tokens)
                label_ids = torch.tensor(tokens.label_ids, device=logits.device)
                dist = AnswerDist.from_logits(logits, label_ids)
                probs[ending].append(dist.probs.double().cpu())
                masses[ending].append(float(dist.valid_mass))
                exact = torch.log_softmax(logits.double(), -1)[label_ids].exp().sum()
                mass_gap = max(mass_gap, abs(float(dist.valid_mass.double()) - float(exact)))
        l1 = torch.tensor([float((p - q).abs().sum()) for p, q in zip(probs["fence"], probs["paper"], strict=True)])
        moved = sum(int(p.argmax() != q.argmax()) for p, q in zip(probs["fence"], probs["paper"], strict=True))
        acc = {e: sum(int(p.argmax() == q.answer_index) for p, q in zip(probs[e], questions, strict=True))
               for e in TEMPLATE_ENDINGS}
        n = len(questions)
        print(f"| {name} | {l1.max():.4f} | {l1.mean():.4f} | {moved}/{n} | {acc['fence']}/{n} | {acc['paper']}/{n} | "
              f"{sum(masses['fence']) / n:.4f} | {sum(masses['paper']) / n:.4f} |")
    print(f"\nlargest |label mass float32 − float64| over all prompts: {mass_gap:.2e}")


if __name__ == "__main__":
    main()
