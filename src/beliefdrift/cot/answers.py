"""The answer-level view of reasoning trajectories: normalised answers per generated position n, their
distribution over the rollouts, and the majority answer (per position, and over all generated pairs —
self-consistency) with its correctness. Unparseable answers count as "invalid" and never win a vote."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

INVALID = "invalid"
#: A condition whose answers parse in fewer than this share of its pairs: its c_n and majority accuracy rest on few
#: answers, and every surface (the summary table, summary.json, the explorer) marks them.
MIN_PARSED = 0.5


def majority(answers: Sequence[str | None]) -> str | None:
    """The most frequent valid answer (ties: the one seen first), None if there is none."""
    counts = Counter(a for a in answers if a is not None)
    return counts.most_common(1)[0][0] if counts else None


def answer_view(answers: Sequence[Sequence[str | None]], gold: str) -> dict:
    """`answers[r][n]`: rollout r's normalised answer at generated position n+1 (rollouts may be shorter).

    Returns per position the answer counts, the majority answer and whether it is `gold`, plus the
    majority over every generated answer of every rollout.
    """
    length = max((len(a) for a in answers), default=0)
    positions = []
    for n in range(length):
        column = [a[n] for a in answers if n < len(a)]
        vote = majority(column)
        counts = Counter(INVALID if a is None else a for a in column)
        positions.append({"counts": dict(counts.most_common()), "majority": vote, "correct": vote == gold})
    overall = majority([a for rollout in answers for a in rollout])
    return {"gold": gold, "positions": positions, "majority": overall, "correct": overall == gold}


def majority_accuracy(views: Sequence[dict]) -> dict:
    """Accuracy of the majority answer over questions: per position (over questions reaching it) and overall
    (None where no question counts)."""
    length = max((len(v["positions"]) for v in views), default=0)
    per_position = []
    for n in range(length):
        hits = [v["positions"][n]["correct"] for v in views if n < len(v["positions"])]
        per_position.append(sum(hits) / len(hits) if hits else None)
    overall = sum(v["correct"] for v in views) / len(views) if views else None
    return {"per_position": per_position, "overall": overall}


def answer_totals(view: dict) -> dict[str, int]:
    """Over every generated pair of an `answer_view`: the answers that parse, those that do not, and those equal to
    gold."""
    counts = [position["counts"] for position in view["positions"]]
    return {"valid_answers": sum(n for c in counts for answer, n in c.items() if answer != INVALID),
            "unparsed_answers": sum(c.get(INVALID, 0) for c in counts),
            "correct_answers": sum(c.get(view["gold"], 0) for c in counts)}


def few_parsed(valid_answers: int, pairs: int) -> bool:
    """Whether fewer than `MIN_PARSED` of `pairs` answers parse (no pair at all counts as few)."""
    return valid_answers < MIN_PARSED * pairs or pairs == 0
