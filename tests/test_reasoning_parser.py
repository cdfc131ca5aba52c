"""The thought–answer pair parser: never raises, accounts for every character it drops, streams
consistently, and round-trips well-formed pairs."""

from __future__ import annotations

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from beliefdrift.cot.parser import PAIR_SEPARATOR, TAG, PairParser, parse_pairs, render_pair

FRAGMENTS = ["<sol>", "</sol>", "<ans>", "</ans>", "<SOL>", "</Ans>", "<", ">", "/", "sol", "ans", "42", "x y",
             " ", "\n", "\n\n", "é", "Pair 1:", "<ans", "</so"]
PIECES = ["", "", "x", "Pair 1:", "42", " ", "\n", "<", "é", "<ans", "</so", "<sol>"]


def maybe(*tags: str) -> st.SearchStrategy[str]:
    return st.sampled_from(["", *tags])


# Pair-shaped text: every tag of a pair may be missing, commentary may sit anywhere.
pair_like = st.tuples(
    st.sampled_from(PIECES), maybe("<sol>", "<SOL>"), st.sampled_from(PIECES), maybe("</sol>"),
    st.sampled_from(PIECES), maybe("<ans>", "<Ans>"), st.sampled_from(PIECES), maybe("</ans>", "</ans>"),
).map("".join)
messy_text = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
    st.lists(pair_like, max_size=6).map("".join),
)
content = st.text(max_size=30).map(str.strip).filter(lambda s: s and not TAG.search(s))
junk = st.text(max_size=20).filter(lambda s: s.strip() and not TAG.search(s))


def visible(text: str) -> int:
    return sum(not ch.isspace() for ch in text)


@settings(max_examples=400, deadline=None)
@given(messy_text)
def test_every_visible_character_is_kept_dropped_or_a_tag(text):
    result = parse_pairs(text)
    assert len(result.pairs) == len(re.findall("</ans>", text, re.IGNORECASE))
    owner = [None] * len(text)

    def claim(start: int, end: int, who: str) -> None:
        for i in range(start, end):
            if not text[i].isspace():
                assert owner[i] is None, f"{who} overlaps {owner[i]} at {i} in {text!r}"
                owner[i] = who

    for pair in result.pairs:
        assert text[slice(*pair.solution_span)] == pair.solution
        assert text[slice(*pair.answer_span)] == (pair.answer or "")
        assert not TAG.search(pair.solution) and not TAG.search(pair.answer or "")
        assert pair.span[1] <= len(text) and text[pair.span[1] - 6 : pair.span[1]].lower() == "</ans>"
        claim(*pair.solution_span, "solution")
        claim(*pair.answer_span, "answer")
    for start, end in result.dropped:
        claim(start, end, "dropped")
    for match in TAG.finditer(text):
        if owner[match.start()] != "dropped":
            claim(match.start(), match.end(), "tag")
    assert all(owner[i] is not None for i, ch in enumerate(text) if not ch.isspace()), text
    assert result.dropped_chars == sum(visible(text[s:e]) for s, e in result.dropped)
    assert result.malformed == sum(not p.well_formed for p in result.pairs) + result.unfinished
    assert sum(result.issue_counts().values()) >= result.malformed


@settings(max_examples=200, deadline=None)
@given(messy_text, st.lists(st.integers(0, 80), max_size=6))
def test_streaming_in_any_pieces_equals_parsing_at_once(text, cuts):
    parser = PairParser()
    completed = []
    points = sorted({min(c, len(text)) for c in cuts})
    for start, end in zip([0, *points], [*points, len(text)], strict=True):
        completed += parser.feed(text[start:end])
    streamed, whole = parser.finish(), parse_pairs(text)
    assert streamed == whole
    assert tuple(completed) == whole.pairs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(content, content), max_size=6))
def test_well_formed_pairs_round_trip(pairs):
    text = PAIR_SEPARATOR.join(render_pair(s, a) for s, a in pairs)
    assume(len(TAG.findall(text)) == 4 * len(pairs))
    result = parse_pairs(text)
    assert [(p.solution, p.answer) for p in result.pairs] == pairs
    assert all(p.well_formed for p in result.pairs)
    assert result.dropped == () and result.malformed == 0 and not result.unfinished


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(content, content, st.one_of(st.none(), junk)), min_size=1, max_size=5), st.none() | junk)
def test_commentary_between_pairs_is_dropped_and_counted(pairs, trailing):
    text = "".join(f"{extra or ''}\n{render_pair(s, a)}\n" for s, a, extra in pairs) + (trailing or "")
    assume(len(TAG.findall(text)) == 4 * len(pairs))
    result = parse_pairs(text)
    assert [(p.solution, p.answer) for p in result.pairs] == [(s, a) for s, a, _ in pairs]
    assert [p.issues for p in result.pairs] == [("extra_text",) if extra else () for _, _, extra in pairs]
    inserted = [extra for _, _, extra in pairs if extra] + ([trailing] if trailing else [])
    assert result.dropped_chars == sum(visible(j) for j in inserted)
    assert not result.unfinished


def test_malformed_pairs_are_recovered_and_flagged():
    text = (
        "<sol>unclosed <ans>1</ans>\n"  # <sol> never closed
        "just text <ans>2</ans>\n"  # no <sol>
        "<sol>s3</sol> 3</ans>\n"  # no <ans>
        "<sol>lost</sol><sol>s4</sol><ans>4</ans>\n"  # a solution left without an answer
        "<sol>s5</sol><ans></ans>\n"  # empty answer
        "<sol>s6</sol> note <ans>6</ans>\n"  # commentary between solution and answer
        "<sol>s7</sol><ans>draft<ans>7</ans>\n"  # the last <ans> holds the answer
        "<sol>cut off"  # never finished
    )
    result = parse_pairs(text)
    assert [(p.solution, p.answer) for p in result.pairs] == [
        ("unclosed", "1"), ("just text", "2"), ("s3", "3"), ("s4", "4"), ("s5", None), ("s6", "6"), ("s7", "7")
    ]
    assert [p.issues for p in result.pairs] == [
        ("unclosed_sol",), ("missing_sol",), ("missing_ans_open",), ("orphan_sol",), ("empty_answer",),
        ("extra_text",), ("extra_text",),
    ]
    assert result.unfinished and result.malformed == 8
    assert [text[s:e] for s, e in result.dropped] == ["<sol>lost</sol>", "note", "<ans>draft", "<sol>cut off"]
