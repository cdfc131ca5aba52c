"""Size and power of the c.i.d. check (`diagnostics.cid`) on simulated processes: the sign-flip test of ‖D̄‖₁
that decides "c.i.d. rejected", against the rule it replaced (some option's 95% bootstrap band leaves out 0).

Each question draws θ_0 ~ Dirichlet(1) over |𝒜| options and J paths of N answers from one of the processes of
`bench/drift_floor.py`: the Pólya urns (exchangeable, so the sign-flip test is exact), the constant- and growing-step
martingales (c.i.d., not exchangeable) and the pulled processes (drift towards option 0: not c.i.d.). Prints, per
process × |𝒜| × J, the share of questions (%) each rule rejects at the 95% level; a c.i.d. process should be
rejected in at most 5% (Monte Carlo s.e. √(0.05 · 0.95 / Q)).

    python bench/cid.py [--questions 300] [--steps 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

import torch
from drift_floor import DRIFTS, NULLS, Setting

from beliefdrift.diagnostics.cid import cid_check
from beliefdrift.engine.resampling import make_generator, sample_answers


def paths(setting: Setting, options: int, count: int, questions: int, steps: int, seed: int) -> torch.Tensor:
    """Answers [Q, J, N]: J paths of N answers per question, each question with its own θ_0 ~ Dirichlet(1)."""
    generator = make_generator(seed, "cid", setting.name, str(options), str(count))
    exponential = -torch.rand(questions, options, generator=generator, dtype=torch.float64).log()
    theta = (exponential / exponential.sum(1, keepdim=True)).repeat_interleave(count, 0)
    root = setting.process(theta, torch.full((len(theta),), setting.first, dtype=torch.float64), setting.next_weight)
    return sample_answers(root, steps, generator)[0].reshape(questions, count, steps)  # type: ignore[arg-type]


def rejection_rates(answers: torch.Tensor, options: int, seed: int) -> tuple[float, float]:
    """The share of questions rejected by the sign-flip test and by the per-option bands."""
    checks = [cid_check(question, options, make_generator(seed, "check", str(i)))
              for i, question in enumerate(answers)]
    test = sum(not check.consistent for check in checks) / len(checks)
    bands = sum(not bool(((c.low <= 0) & (c.high >= 0)).all()) for c in checks) / len(checks)
    return test, bands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    se = 100 * math.sqrt(0.05 * 0.95 / args.questions)
    print(f"Q = {args.questions} questions per cell, N = {args.steps} answers per path; nominal 5% (s.e. {se:.1f} "
          "points)\n")
    print("| process | options | J | sign-flip test % | per-option bands % |")
    print("|---|---|---|---|---|")
    for setting in (*NULLS, *DRIFTS):
        for options in (2, 5):
            for count in (8, 32):
                answers = paths(setting, options, count, args.questions, args.steps, args.seed)
                test, bands = rejection_rates(answers, options, args.seed)
                print(f"| {setting.name} | {options} | {count} | {100 * test:.1f} | {100 * bands:.1f} |", flush=True)


if __name__ == "__main__":
    main()
