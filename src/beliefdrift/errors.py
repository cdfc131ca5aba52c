"""User errors: mistakes in the input that the CLI reports as one line (exit status 2), and the helpers that word
them."""

from __future__ import annotations

import sys


class UserError(ValueError):
    """A mistake in the user's input (flag, config key, file): the message says what, where and what was
    expected."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name when the message is empty), for one-line errors."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def not_utf8(where: str, err: UnicodeDecodeError) -> str:
    """"where:line: not UTF-8 (why)" for the bytes of a whole file that `err` could not decode."""
    line = err.object.count(b"\n", 0, err.start) + 1
    return f"{where}:{line}: not UTF-8 ({err.reason})"


def too_many_digits() -> str:
    """An integer longer than Python converts from or to text (`sys.get_int_max_str_digits`), in an error line."""
    return f"an integer of more than {sys.get_int_max_str_digits()} digits (the most Python reads)"
