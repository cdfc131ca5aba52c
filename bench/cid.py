"""Size and power of the c.i.d. check (`diagnostics.cid`: the last answers of the paths against their first
predictive), beside the sign-flip test of ‖D̄‖₁ it replaced.

Each question draws θ_0 from the process's start law and J paths of N answers from one of the processes of
`bench/drift_floor.py`: Pólya urns (exchangeable), near-vertex urns, constant, growing, absorbing and heavy-tailed
steps (c.i.d., not exchangeable), a freezing process whose steps grow geometrically, w_t = min(1, 0.01 · 1.5^t)
(its late answers repeat: the case where the sign-flip test failed), and the pulled processes (drift towards option
0: not c.i.d.). Prints, per process × |𝒜| × J × N, the share of questions (%) the check rejects at 5%, with ✓ where
a c.i.d. process stays within nominal + 2 s.e. (s.e. √(0.05 · 0.95 / Q)); the share whose smallest attainable p
exceeds 5% (`CIDCheck.smallest_p`: the paths drawn could not reject whatever their last answers); and the former
sign-flip test's rejection rate.

    python bench/cid.py [--questions 1000] [--seed 0] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from drift_floor import DRIFTS, NULLS, VERTICES, Setting, grid_cells

from beliefdrift.diagnostics.cid import CID_ALPHA, cid_check, half_differences
from beliefdrift.engine.resampling import make_generator, sample_answers

EXACT_PATHS = 13  # the sign-flip test enumerated every pattern up to this many paths, else 1000 random ones


def freezing(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """w_{t+1} = min(1, 1.5 w_t): tiny steps at first, then θ jumps onto the vertex of a late answer."""
    return (1.5 * weight).clamp(max=1.0)


FREEZING = Setting("freezing", 0.01, freezing)
#: (settings, options, J, N) of every block of cells
GRID = (
    ((*NULLS, FREEZING), (2, 5), (8, 32), (10, 20)),
    ((FREEZING,), (2,), (16,), (20,)),
    (VERTICES, (4,), (8, 32), (20,)),
    (DRIFTS, (2, 5), (8, 32), (10, 20)),
)
QUICK = (((NULLS[4], FREEZING, DRIFTS[1]), (2,), (8,), (20,)),)


def paths(setting: Setting, options: int, count: int, questions: int, steps: int,
          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers [Q, J, N] and each path's θ_0 [Q, J, |𝒜|]: J paths per question from its own θ_0."""
    generator = make_generator(seed, "cid", setting.name, str(options), str(count), str(steps))
    theta = setting.start(questions, options, generator).repeat_interleave(count, 0)

    def schedule(weight: torch.Tensor) -> torch.Tensor:
        return setting.next_weight(weight, generator)

    root = setting.process(theta, torch.full((len(theta),), setting.first, dtype=torch.float64), schedule)
    answers = sample_answers(root, steps, generator)[0]  # type: ignore[arg-type]
    return answers.reshape(questions, count, steps), theta.reshape(questions, count, options)


def sign_flip_rejections(differences: np.ndarray, rng: np.random.Generator, resamples: int = 1000) -> np.ndarray:
    """Whether the former test rejects each question: its sign-flip p of ‖D̄‖₁ over the paths' D [Q, J, |𝒜|]
    (every pattern up to `EXACT_PATHS` paths, else random ones with the +1) is ≤ 5%."""
    count = differences.shape[1]
    exact = count <= EXACT_PATHS
    bits = (np.arange(2**count)[:, None] >> np.arange(count)) & 1 if exact else rng.integers(0, 2, (resamples, count))
    flipped = np.abs(np.einsum("pj,qja->qpa", 1.0 - 2.0 * bits, differences) / count).sum(-1)
    at_least = (flipped >= np.abs(differences.mean(1)).sum(-1)[:, None] - 1e-12).sum(1)
    p = at_least / len(bits) if exact else (1 + at_least) / (resamples + 1)
    return p <= CID_ALPHA


def rates(answers: torch.Tensor, start: torch.Tensor, seed: int) -> tuple[float, float, float]:
    """The shares of questions the check rejects, that it cannot reject, and that the sign-flip test rejected."""
    options = start.shape[-1]
    checks = [cid_check(question, options, make_generator(seed, "check", str(i)), start=theta)
              for i, (question, theta) in enumerate(zip(answers, start, strict=True))]
    differences = torch.stack([half_differences(question, options) for question in answers]).numpy()
    before = sign_flip_rejections(differences, np.random.default_rng(seed))
    return (float(np.mean([not check.consistent for check in checks])),
            float(np.mean([check.smallest_p > CID_ALPHA for check in checks])), float(before.mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="three cells only (a smoke run)")
    args = parser.parse_args()
    se = 100 * math.sqrt(CID_ALPHA * (1 - CID_ALPHA) / args.questions)
    print(f"Q = {args.questions} questions per cell; nominal {100 * CID_ALPHA:g}% (s.e. {se:.1f} points; ✓: ≤ "
          f"nominal + 2 s.e. = {100 * CID_ALPHA + 2 * se:.1f}%)\n")
    print("| process | options | J | N | rejected % | cannot reject % | sign-flip test before % |")
    print("|---|---|---|---|---|---|---|")
    begin = time.perf_counter()
    for setting, options, count, steps in grid_cells(QUICK if args.quick else GRID):
        answers, start = paths(setting, options, count, args.questions, steps, args.seed)
        rejected, untestable, before = rates(answers, start, args.seed)
        ok = " ✓" if setting not in DRIFTS and 100 * rejected <= 100 * CID_ALPHA + 2 * se else ""
        print(f"| {setting.name} | {options} | {count} | {steps} | {100 * rejected:.1f}{ok} | "
              f"{100 * untestable:.1f} | {100 * before:.1f} |", flush=True)
    print(f"\n{time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()
