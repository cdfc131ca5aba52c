"""Streaming parser for sequences of thought–answer pairs `<sol>…</sol><ans>…</ans>`.

A pair is whatever the model wrote up to and including a `</ans>` tag (tags are case-insensitive), so the
number of pairs always equals the number of `</ans>` tags — the same count the decoder stops on. Inside
a pair the parser is tolerant: a missing `<sol>` or `<ans>`, an unclosed `<sol>`, stray tags, earlier
solutions left without an answer and commentary between pairs are all recovered from as well as possible
and recorded as issues on the pair; text that ends up in no solution or answer is *dropped* and its span
recorded. Text after the last `</ans>` is never a pair (dropped; `unfinished` if it holds a tag).

Every non-whitespace character of the stream lies in exactly one of: a pair's solution span, its answer
span, a dropped span, or a structural tag (`<sol>`, `</sol>`, `<ans>`, `</ans>`) outside dropped spans.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

TAG = re.compile(r"<(/?)(sol|ans)>", re.IGNORECASE)
CLOSE_ANSWER = re.compile(r"</ans>", re.IGNORECASE)
PAIR_SEPARATOR = "\n\n"

Span = tuple[int, int]


@dataclass(frozen=True)
class Pair:
    """One thought–answer pair R_n = (t_n, a_n). Spans are [start, end) character offsets in the stream.

    `answer` is None when the model wrote no answer text; `issues` is empty for a well-formed pair.
    `span` runs from the pair's first kept character to the end of its `</ans>` (what ψ(R_n) embeds).
    """

    solution: str
    answer: str | None
    span: Span
    solution_span: Span
    answer_span: Span
    issues: tuple[str, ...] = ()

    @property
    def well_formed(self) -> bool:
        return not self.issues


@dataclass(frozen=True)
class ParseResult:
    """All pairs of a finished stream and what was dropped from it."""

    text: str
    pairs: tuple[Pair, ...]
    dropped: tuple[Span, ...]
    unfinished: bool

    @property
    def dropped_chars(self) -> int:
        """Non-whitespace characters that are in no solution, answer or structural tag."""
        return sum(_visible(self.text[start:end]) for start, end in self.dropped)

    @property
    def malformed(self) -> int:
        """Pairs with at least one issue, plus one for an unfinished trailing pair."""
        return sum(not pair.well_formed for pair in self.pairs) + int(self.unfinished)

    def issue_counts(self) -> dict[str, int]:
        counts = Counter(issue for pair in self.pairs for issue in pair.issues)
        if self.unfinished:
            counts["unfinished"] += 1
        return dict(sorted(counts.items()))


def _visible(text: str) -> int:
    return sum(not ch.isspace() for ch in text)


def _strip(text: str, start: int, end: int) -> Span:
    """[start, end) shrunk to exclude leading and trailing whitespace (empty spans collapse to start)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


class PairParser:
    """Feed text as it is generated; `feed` returns the pairs completed by that text, `finish` the result.

    Only text up to a complete `</ans>` is ever interpreted, so the result does not depend on how the
    stream was cut into pieces.
    """

    def __init__(self) -> None:
        self._text = ""
        self._chunk_start = 0  # start of the pair being written
        self._scan_from = 0  # where the next `</ans>` may start
        self._pairs: list[Pair] = []
        self._dropped: list[Span] = []

    @property
    def text(self) -> str:
        return self._text

    @property
    def num_pairs(self) -> int:
        return len(self._pairs)

    def feed(self, text: str) -> list[Pair]:
        self._text += text
        completed = []
        for match in CLOSE_ANSWER.finditer(self._text, self._scan_from):
            completed.append(self._pair(self._chunk_start, match.start(), match.end()))
            self._chunk_start = match.end()
        self._pairs += completed
        self._scan_from = max(self._chunk_start, len(self._text) - len("</ans>") + 1)
        return completed

    def finish(self) -> ParseResult:
        start, end = _strip(self._text, self._chunk_start, len(self._text))
        unfinished = TAG.search(self._text, start, end) is not None
        dropped = [*self._dropped, (start, end)] if start < end else list(self._dropped)
        return ParseResult(self._text, tuple(self._pairs), tuple(dropped), unfinished)

    # ---- one pair ---------------------------------------------------------------------------------------

    def _drop(self, start: int, end: int) -> bool:
        """Record [start, end) as dropped if it has visible text; say whether it had."""
        start, end = _strip(self._text, start, end)
        if start < end:
            self._dropped.append((start, end))
        return start < end

    def _tag_free(self, start: int, end: int, keep_last: bool, issues: list[str]) -> Span:
        """The part of [start, end) without tags: the text after the last tag (`keep_last`) or before the
        first; the rest is dropped as a stray."""
        tags = list(TAG.finditer(self._text, start, end))
        if not tags:
            return _strip(self._text, start, end)
        issues.append("stray_tag")
        if keep_last:
            self._drop(start, tags[-1].end())
            return _strip(self._text, tags[-1].end(), end)
        self._drop(tags[0].start(), end)
        return _strip(self._text, start, tags[0].start())

    def _pair(self, start: int, end: int, close_end: int) -> Pair:
        """Parse the chunk [start, end) that precedes a `</ans>` ending at `close_end`."""
        text, issues = self._text, []
        tags = [(m.group(0).lower(), m.start(), m.end()) for m in TAG.finditer(text, start, end)]
        kept_tags: list[int] = []  # starts of the structural tags the pair uses

        # The answer: after the last <ans>; failing that, after the last </sol>.
        answer_opens = [t for t in tags if t[0] == "<ans>"]
        solution_closes = [t for t in tags if t[0] == "</sol>"]
        if answer_opens:
            body_end, answer_start = answer_opens[-1][1], answer_opens[-1][2]
            kept_tags.append(body_end)
        else:
            issues.append("missing_ans_open")
            body_end = answer_start = solution_closes[-1][2] if solution_closes else end
        answer_span = self._tag_free(answer_start, end, keep_last=False, issues=issues)
        answer = text[answer_span[0] : answer_span[1]] or None
        if answer is None:
            issues.append("empty_answer")

        # The solution: inside the last <sol> of the body (up to its </sol>, or the body's end if unclosed).
        body_tags = [t for t in tags if t[2] <= body_end]
        opens = [t for t in body_tags if t[0] == "<sol>"]
        if opens:
            _, open_start, solution_start = opens[-1]
            kept_tags.append(open_start)
            before = body_tags[: body_tags.index(opens[-1])]
            if self._drop(start, open_start):
                issues.append("orphan_sol" if any(t[0] == "<sol>" for t in before) else "extra_text")
            closes = [t for t in body_tags if t[0] == "</sol>" and t[1] >= solution_start]
            if closes:
                solution_end = closes[0][1]
                kept_tags.append(solution_end)
                if self._drop(closes[0][2], body_end):
                    issues.append("extra_text")
            else:
                issues.append("unclosed_sol")
                solution_end = body_end
            solution_span = self._tag_free(solution_start, solution_end, keep_last=False, issues=issues)
        else:
            issues.append("missing_sol")
            closes = [t for t in body_tags if t[0] == "</sol>"]
            solution_end = closes[-1][1] if closes else body_end
            if closes:
                kept_tags.append(solution_end)
                if self._drop(closes[-1][2], body_end):
                    issues.append("extra_text")
            solution_span = self._tag_free(start, solution_end, keep_last=True, issues=issues)
        if solution_span[0] == solution_span[1]:
            issues.append("empty_solution")

        first = min([*kept_tags, end], default=end)
        for span in (solution_span, answer_span):
            if span[0] < span[1]:
                first = min(first, span[0])
        return Pair(
            solution=text[solution_span[0] : solution_span[1]],
            answer=answer,
            span=(first, close_end),
            solution_span=solution_span,
            answer_span=answer_span,
            issues=tuple(dict.fromkeys(issues)),
        )


def parse_pairs(text: str) -> ParseResult:
    """Parse a complete text in one go (same result as streaming it)."""
    parser = PairParser()
    parser.feed(text)
    return parser.finish()


def render_pair(solution: str, answer: str) -> str:
    """A well-formed pair in the layout the prompts ask for."""
    return f"<sol>{solution}</sol>\n<ans>{answer}</ans>"
