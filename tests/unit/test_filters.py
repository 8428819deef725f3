"""Snapshot filters: one boolean expression of what a filter may contain, or refused with
the reason (no database here; ``test_chunks.py`` runs filters against PostgreSQL)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FilterError
from processor.snapshot.filter_tree import FUNCTIONS
from processor.snapshot.filters import check_filter, check_one_expression

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
    check_one_expression(text)


@pytest.mark.parametrize(("text", "reason"), REFUSED.items(), ids=range(len(REFUSED)))
def test_what_could_escape_its_parentheses_is_refused(text: str, reason: str) -> None:
    with pytest.raises(FilterError, match=reason.replace("(", r"\(")):
        check_one_expression(text)


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
    check_one_expression(text)


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
            check_one_expression(injected)


ALLOWED = [
    "v > 5 AND status = 'open'",
    "lower(name) LIKE 'a%' OR name ILIKE 'B%'",
    "extract(year from ts) = 2020 AND date_trunc('day', ts) < now() - interval '1 day'",
    "id IN (1, 2, 3) AND v BETWEEN 1 AND 9 AND v IS NOT NULL AND flag IS TRUE",
    "coalesce(a, b) = 1 AND greatest(a, b) > 3 AND nullif(a, 0) IS NULL",
    "CASE WHEN a > 1 THEN 'x' ELSE 'y' END = 'x'",
    "(a, b) > (1, 2) AND tags @> ARRAY['x'] AND doc->>'k' = 'v' AND arr[1] = 2",
    "substring(name from 1 for 2) = 'ab' AND trim(name) <> '' AND position('a' in name) > 0",
    "ts AT TIME ZONE 'UTC' > '2020-01-01' AND t::date = current_date",
    "x::int > 1 AND x::numeric(10, 2) > 1 AND v = ANY('{1,2}'::int[])",
    "name COLLATE \"C\" < 'b' AND v > 1 AND NOT (a AND b)",
    "name SIMILAR TO 'a%' AND x IS DISTINCT FROM 1",
]
#: Filters that are one expression, and what each may not contain.
NOT_ALLOWED = {
    "query_to_xml('SELECT 1', true, true, '') IS NOT NULL": "the function query_to_xml",
    "(SELECT count(*) FROM other) > 0": "a subquery is not allowed",
    "EXISTS (SELECT 1 FROM other)": "a subquery is not allowed",
    "v = ANY(SELECT v FROM other)": "a subquery is not allowed",
    "pg_terminate_backend(pg_backend_pid())": "the function pg_terminate_backend",
    "set_config('statement_timeout', '0', false) = '0'": "the function set_config",
    "pg_sleep(600) IS NOT NULL": "the function pg_sleep",
    "pg_catalog.pg_sleep(1) IS NULL": "the function pg_catalog.pg_sleep",
    "my_function()": "the function my_function",
    "public.lower(name) = 'a'": "the function public.lower",
    "nextval('s') > 0": "the function nextval",
    "current_setting('search_path') = ''": "the function current_setting",
    "count(*) > 1": "the function count",
    "lower(name) OVER () = 'a'": "aggregates and window functions",
    "concat(VARIADIC ARRAY['a']) = 'a'": "VARIADIC",
    "a OPERATOR(public.===) b": "the operator public.===",
    "'t'::regclass IS NOT NULL": "a cast to regclass",
    "x::public.mytype IS NULL": "a cast to public.mytype",
    "current_user = 'postgres'": "the date and time",
    "$1 = 1": "a parameter",
    "t.* IS NULL": "a column is named by its plain name",
    "orders.to_jsonb IS NOT NULL": "a column is named by its plain name",  # to_jsonb(orders)
    "id.pg_terminate_backend": "a column is named by its plain name",
    "(pid).pg_terminate_backend": "only subscripts may follow a value",
    "v >": "not valid SQL: syntax error",
}


@pytest.mark.parametrize("text", ALLOWED)
def test_columns_operators_and_pure_functions_are_allowed(text: str) -> None:
    check_filter(text)


@pytest.mark.parametrize(("text", "reason"), NOT_ALLOWED.items(), ids=range(len(NOT_ALLOWED)))
def test_what_reads_beyond_its_arguments_or_acts_is_refused_by_the_parse_tree(
    text: str, reason: str
) -> None:
    with pytest.raises(FilterError, match=re.escape(reason)):
        check_filter(text)


def test_no_allowed_function_reads_beyond_its_arguments_or_acts() -> None:
    """The functions that reach other tables, files, sessions, settings or sequences, or
    wait, are not allowed however they are spelled."""
    acting = {
        "query_to_xml", "pg_sleep", "set_config", "current_setting", "nextval",
        "pg_terminate_backend", "pg_cancel_backend", "pg_read_file", "lo_import",
        "dblink", "txid_current", "pg_advisory_lock", "random", "clock_timestamp",
    }  # fmt: skip
    assert not FUNCTIONS & acting
