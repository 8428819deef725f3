"""A snapshot filter (Debezium's ``additional-conditions``) stays one boolean expression.

A filter is SQL by design: it is written into the chunk reads as ``AND (<filter>)``.
Text that closes that parenthesis could change the query around it (``true) OR
(true`` would read the whole table in one chunk), and text that ends the statement
could run another. So before a filter is used it must be, lexically, one
expression: every parenthesis it closes it opened, and it holds no statement
separator and no comment outside its string literals and quoted identifiers. The
scan follows PostgreSQL's lexer for what can hide those characters: standard
strings (``'it''s'``, with ``standard_conforming_strings`` on, which the processor's
sessions set), escape strings (``E'\\''``), quoted identifiers (``"a""b"``) and
dollar quotes (``$tag$ ... $tag$``). Then PostgreSQL's parser decides what it may
contain (:mod:`processor.snapshot.filter_tree`: its columns, operators and functions
that read only their arguments), the database plans it (a syntax or type error is
the filter's), and every query that carries it goes by the extended protocol (one
statement) in a read-only transaction of a read-only session that starts from the
connection's own settings: the check here is the first of four walls, not the only
one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from processor.errors import FilterError, SourceUnavailableError
from processor.snapshot.chunk_reader import ChunkReader
from processor.snapshot.filter_tree import check_tree

#: A filter longer than this is refused (Debezium's are a line or two).
MAX_FILTER_CHARS = 2048
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")


def check_filter(text: str) -> None:
    """:class:`FilterError` naming what makes ``text`` more than one expression, or what
    in it a filter may not contain (:mod:`processor.snapshot.filter_tree`)."""
    check_one_expression(text)
    check_tree(text)


def check_one_expression(text: str) -> None:
    """:class:`FilterError` naming what makes ``text`` more than one boolean expression."""
    if not text.strip():
        raise FilterError("the filter is empty")
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(f"the filter is longer than {MAX_FILTER_CHARS} characters")
    if "\x00" in text:
        raise FilterError("the filter holds a NUL character")
    depth = 0
    at = 0
    end = len(text)
    while at < end:
        char = text[at]
        if char == "'":
            escaped = at > 0 and text[at - 1] in "eE" and not _ident_char(text, at - 2)
            at = _string_end(text, at, escaped)
        elif char == '"':
            at = _quoted_end(text, at, '"', "a quoted identifier")
        elif char == "$" and not _ident_char(text, at - 1):
            tag = _DOLLAR_TAG.match(text, at)
            if tag is None:
                at += 1  # a parameter mark ($1), which the database refuses
                continue
            close = text.find(tag.group(0), tag.end())
            if close < 0:
                raise FilterError("the filter has a dollar-quoted string that does not end")
            at = close + len(tag.group(0))
        elif char == ";":
            raise FilterError("the filter holds ';': it must be one expression, not statements")
        elif text.startswith("--", at) or text.startswith("/*", at):
            raise FilterError("the filter holds a comment ('--' or '/*'), which is not allowed")
        elif char == "(":
            depth += 1
            at += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise FilterError(
                    "the filter closes a parenthesis it did not open: it must be one expression"
                )
            at += 1
        else:
            at += 1
    if depth:
        raise FilterError("the filter leaves a parenthesis open")


def refused_filters(
    conditions: Mapping[str, str], reader: Callable[[], ChunkReader]
) -> dict[str, str]:
    """The tables whose filter is refused, and why: not one expression, or not one the
    source can plan. Where the source cannot be reached now, the plan is left to the
    table's first read."""
    refused = {}
    for table, condition in conditions.items():
        try:
            try:
                reader().check_filter(table, condition)  # one expression, then planned
            except SourceUnavailableError:
                check_filter(condition)  # the expression now, the plan at its first read
        except FilterError as exc:
            refused[table] = f"the filter of {table} is refused: {exc}"
    return refused


def _ident_char(text: str, at: int) -> bool:
    """Whether ``text[at]`` continues an identifier or a number (so a quote or ``$`` there
    does not start a token of its own)."""
    if at < 0:
        return False
    char = text[at]
    return char.isalnum() or char in "_$" or ord(char) >= 0x80


def _string_end(text: str, at: int, escaped: bool) -> int:
    """Where the string literal opening at ``text[at]`` ends (after its closing quote)."""
    at += 1
    while at < len(text):
        char = text[at]
        if escaped and char == "\\":
            at += 2
            continue
        if char == "'":
            if text.startswith("'", at + 1):  # '' stands for one quote
                at += 2
                continue
            return at + 1
        at += 1
    raise FilterError("the filter has a string literal that does not end")


def _quoted_end(text: str, at: int, quote: str, what: str) -> int:
    close = at + 1
    while True:
        close = text.find(quote, close)
        if close < 0:
            raise FilterError(f"the filter has {what} that does not end")
        if not text.startswith(quote, close + 1):
            return close + 1
        close += 2
