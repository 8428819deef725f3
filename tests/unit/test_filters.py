"""Snapshot filters: one boolean expression, or refused with the reason (no database here;
``test_chunks.py`` runs the same filters against PostgreSQL)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FilterError
from processor.snapshot.filters import check_filter

ACCEPTED = [
    "status = 'open'",
    "name = 'it''s (here'",  # a doubled quote inside a string
    "E'\\')' = note",  # an escape string holding a quote and a parenthesis
    "'\\' = note",  # a standard string: the backslash is a character
    "sizee'x' IS NOT NULL",  # an identifier, then a standard string
    '"weird)col" > 1',
    '"a""b;" = 2',
    "$$;)$$ = note",
    "$tag$ -- ) $tag$ <> note",
    "a$b$c = 1",  # '$' inside an identifier starts no dollar quote
    "id IN (1, 2, (3))",
    "date '2020-01-01' < created",
    "note ~ '^a;b--c/*d$'",
    "U&'d\\0061t\\+000061' = note",
]
REFUSED = {
    "true) OR (true": "closes a parenthesis it did not open",
    "true; DROP TABLE t": "holds ';'",
    "true); COPY (SELECT 1) TO PROGRAM 'touch /tmp/x'; SELECT (true": "closes a parenthesis",
    "true -- )": "comment",
    "x /* ) */ = 1": "comment",
    "(true": "leaves a parenthesis open",
    "status = 'open": "string literal that does not end",
    "E'\\' = x": "string literal that does not end",  # the backslash escapes the quote
    '"col = 1': "quoted identifier that does not end",
    "$x$ unterminated": "dollar-quoted string that does not end",
    "   ": "empty",
    "a\x00b": "NUL",
    "x" * 3000: "longer than",
}


@pytest.mark.parametrize("text", ACCEPTED)
def test_one_expression_is_accepted(text: str) -> None:
    check_filter(text)


@pytest.mark.parametrize(("text", "reason"), REFUSED.items(), ids=range(len(REFUSED)))
def test_what_could_escape_its_parentheses_is_refused(text: str, reason: str) -> None:
    with pytest.raises(FilterError, match=reason.replace("(", r"\(")):
        check_filter(text)


literals = st.one_of(
    st.text(alphabet="ab();'-/*$ ", max_size=8).map(lambda s: "'" + s.replace("'", "''") + "'"),
    st.text(alphabet='ab();"-/* ', max_size=8).map(lambda s: '"' + s.replace('"', '""') + '"'),
    st.text(alphabet="ab();'\"-/* ", max_size=8).map(lambda s: f"$q${s}$q$"),
    st.sampled_from(["id", "1", "=", "<", "AND", "OR", "NOT", ",", "+"]),
)


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    """Balanced text of literals, identifiers and operators, any characters inside quotes."""
    parts = draw(st.lists(literals, min_size=1, max_size=4))
    if depth < 3 and draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), f"({draw(expressions(depth + 1))})")
    return " ".join(parts)


@given(expressions())
def test_anything_balanced_outside_its_quotes_is_accepted(text: str) -> None:
    check_filter(text)


@given(expressions(), st.sampled_from([")", ";", "--", "/*"]), st.data())
def test_a_bare_closing_or_separator_anywhere_between_tokens_is_refused(
    text: str, bad: str, data: st.DataObject
) -> None:
    tokens = text.split(" ")
    at = data.draw(st.integers(0, len(tokens)))
    injected = " ".join([*tokens[:at], bad, *tokens[at:]])
    # splitting at spaces may cut a literal, whose quote then starts no token
    inside_quotes = any(quote in text for quote in "'\"$")
    if not inside_quotes:
        with pytest.raises(FilterError):
            check_filter(injected)
