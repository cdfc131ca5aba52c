"""Answer-label token ids, resolved in the context where the model will emit them.

`encode("A")` is not what a model sees after `"assistant\\n"` or `"Answer:"`: BPE tokenizers merge a
leading space into the label, SentencePiece adds a word-start marker, and a delimiter may merge with the
next label. So we tokenize the context followed by a sample answer list (`"A\\nB\\nC\\nA\\n"`) and read the
ids off; the list must split into one token per label plus identical delimiter tokens at every position.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase


class AnswerTokenError(ValueError):
    """A label or delimiter does not tokenize as one stable unit in context."""


@dataclass(frozen=True)
class AnswerTokens:
    """A prompt ready for constrained answering.

    `prompt_ids` is the context as the model consumes it (its last characters may have been absorbed into
    the label tokens, e.g. `"Answer:"` + `" A"`); `label_ids[i]` is the single token of label i;
    `delimiter_ids` the tokens fed after every answer.
    """

    prompt_ids: tuple[int, ...]
    label_ids: tuple[int, ...]
    delimiter_ids: tuple[int, ...]

    def answer_ids(self, label_index: int) -> tuple[int, ...]:
        """Tokens that append one answer (label + delimiter) to the context."""
        return (self.label_ids[label_index], *self.delimiter_ids)

    @property
    def step_length(self) -> int:
        return 1 + len(self.delimiter_ids)


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _tokenizer_name(tokenizer: PreTrainedTokenizerBase) -> str:
    return f"{type(tokenizer).__name__}({tokenizer.name_or_path or 'unnamed'})"


def _split_context(full: list[int], context_ids: list[int]) -> int:
    """Length of the longest common token prefix of `full` and `context_ids`."""
    shared = 0
    while shared < min(len(full), len(context_ids)) and full[shared] == context_ids[shared]:
        shared += 1
    return shared


def resolve_single_answer(
    tokenizer: PreTrainedTokenizerBase, context: str, labels: tuple[str, ...] | list[str]
) -> AnswerTokens:
    """Label ids for one answer right after `context` (direct query): `encode(context + L)` must end in
    one token per label after a prompt shared by all labels. No delimiter."""
    context_ids = _encode(tokenizer, context)
    encodings = [_encode(tokenizer, context + label) for label in labels]
    shared = min(_split_context(ids, context_ids) for ids in encodings)
    for label, ids in zip(labels, encodings, strict=True):
        if len(ids) != shared + 1 or ids[:shared] != encodings[0][:shared]:
            raise AnswerTokenError(
                f"{_tokenizer_name(tokenizer)}: label {label!r} is not a single token after {context[-20:]!r} "
                f"(tokens {[tokenizer.decode([t]) for t in ids[shared:]]})"
            )
    label_ids = [ids[shared] for ids in encodings]
    if len(set(label_ids)) != len(label_ids):
        raise AnswerTokenError(f"{_tokenizer_name(tokenizer)}: labels {list(labels)} share a token")
    return AnswerTokens(tuple(encodings[0][:shared]), tuple(label_ids), ())


def resolve_answer_tokens(
    tokenizer: PreTrainedTokenizerBase,
    context: str,
    labels: tuple[str, ...] | list[str],
    delimiter: str = "\n",
) -> AnswerTokens:
    """Ids for a list of answers after `context`: tokenize `context + L1 d L2 d … Lk d L1 d` and split
    it into prompt, label and delimiter ids.

    Raises `AnswerTokenError` naming the tokenizer and label when a label is not one token, the
    delimiter tokenizes differently between positions, or a label changes token after a delimiter.
    """
    labels = list(labels)
    if not delimiter:
        raise ValueError("an answer list needs a non-empty delimiter")
    sample = "".join(label + delimiter for label in [*labels, labels[0]])
    full = _encode(tokenizer, context + sample)
    shared = _split_context(full, _encode(tokenizer, context))
    prompt_ids, rest = full[:shared], full[shared:]
    steps = len(labels) + 1
    if len(rest) % steps or len(rest) // steps < 2:
        raise AnswerTokenError(
            f"{_tokenizer_name(tokenizer)}: the answer list {sample!r} does not split into one token per "
            f"label plus a fixed delimiter (got tokens {[tokenizer.decode([t]) for t in rest]}); "
            f"a label among {labels} is not a single token in context"
        )
    width = len(rest) // steps
    chunks = [rest[i * width : (i + 1) * width] for i in range(steps)]
    label_ids = [chunk[0] for chunk in chunks[:-1]]
    delimiter_ids = chunks[0][1:]
    for label, chunk in zip([*labels, labels[0]], chunks, strict=True):
        decoded = tokenizer.decode([chunk[0]]).strip()
        if decoded != label:
            raise AnswerTokenError(
                f"{_tokenizer_name(tokenizer)}: label {label!r} is not a single token in context "
                f"(first token decodes to {decoded!r})"
            )
        if chunk[1:] != delimiter_ids:
            raise AnswerTokenError(
                f"{_tokenizer_name(tokenizer)}: delimiter {delimiter!r} after label {label!r} tokenizes as "
                f"{chunk[1:]} but as {delimiter_ids} after {labels[0]!r}"
            )
    if chunks[-1][0] != label_ids[0]:
        raise AnswerTokenError(
            f"{_tokenizer_name(tokenizer)}: label {labels[0]!r} tokenizes differently at the start of the "
            f"list and after a delimiter"
        )
    if len(set(label_ids)) != len(label_ids):
        raise AnswerTokenError(f"{_tokenizer_name(tokenizer)}: labels {labels} share a token")
    return AnswerTokens(tuple(prompt_ids), tuple(label_ids), tuple(delimiter_ids))
