"""What a snapshot filter may contain, decided on PostgreSQL's own parse tree.

A filter that is one expression (:mod:`processor.snapshot.filters`) can still call any
function the processor's role may execute: ``query_to_xml('SELECT ...')`` runs any
query text, a subquery reads other tables, ``pg_terminate_backend`` ends other
sessions, ``set_config`` changes the session, ``pg_sleep`` holds a connection.
``EXPLAIN`` shows none of that (it does not show function calls, nor SQL inside a
string), so the filter is parsed with PostgreSQL's parser (``pglast``) and walked:
every node must be one this module allows, every function one of
:data:`FUNCTIONS`, every type cast one of :data:`TYPES`, every column a plain name
(``t.f`` and ``(col).f`` are PostgreSQL's notation for calling ``f``). What is not
allowed is refused with what it is. The sessions that run filters find bare names in
``pg_catalog`` alone (:meth:`tidemark.core.config.SourceConfig.session`), so an allowed
name or operator cannot resolve to one planted in another schema. A filter may read its
table's columns, constants, operators, ``CASE``, ``COALESCE``, ``GREATEST``/``LEAST``,
``NULLIF``, ``IN``, ``BETWEEN``, ``LIKE``, ``SIMILAR TO``, ``IS [NOT] NULL``, array and
row values, and the current date and time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pglast import ast, parse_sql
from pglast.enums import A_Expr_Kind, SetOperation, SQLValueFunctionOp
from pglast.parser import ParseError

from processor.errors import FilterError

#: Functions a filter may call: built-in, without side effects, reading nothing but
#: their arguments (by their name in ``pg_catalog``; the parser writes some syntax as
#: calls: ``EXTRACT``, ``SUBSTRING``, ``POSITION``, ``TRIM``, ``AT TIME ZONE``).
FUNCTIONS = frozenset(
    {
        # numbers
        "abs", "ceil", "ceiling", "div", "floor", "mod", "power", "round", "sign", "sqrt",
        "trunc", "width_bucket",
        # text
        "btrim", "char_length", "character_length", "concat", "concat_ws", "initcap",
        "left", "length", "lower", "lpad", "ltrim", "md5", "octet_length", "position",
        "regexp_like", "regexp_match", "regexp_replace", "replace", "reverse", "right",
        "rpad", "rtrim", "split_part", "starts_with", "strpos", "substr", "substring",
        "translate", "upper", "similar_to_escape", "like_escape",
        # dates and times
        "age", "date_part", "date_trunc", "extract", "isfinite", "justify_days",
        "justify_hours", "justify_interval", "make_date", "make_interval", "make_time",
        "make_timestamp", "make_timestamptz", "now", "statement_timestamp", "timezone",
        "to_char", "to_date", "to_number", "to_timestamp", "transaction_timestamp",
        # JSON and arrays
        "array_length", "array_lower", "array_position", "array_upper", "cardinality",
        "json_array_length", "json_extract_path", "json_extract_path_text", "json_typeof",
        "jsonb_array_length", "jsonb_extract_path", "jsonb_extract_path_text",
        "jsonb_typeof",
    }
)  # fmt: skip
#: Types a filter may cast to (their input functions read nothing but their text), by
#: the names the parser gives them (``int`` is ``int4``, ``character varying``
#: ``varchar``).
TYPES = frozenset(
    {
        "bool", "int2", "int4", "int8", "numeric", "float4", "float8", "text", "varchar",
        "bpchar", "char", "name", "uuid", "date", "time", "timetz", "timestamp",
        "timestamptz", "interval", "json", "jsonb", "bytea", "inet", "cidr", "macaddr",
        "money", "bit", "varbit",
    }
)  # fmt: skip
#: The ``A_Expr`` kinds a filter may use: operators, ``IN``, ``LIKE``, ``BETWEEN``...
_EXPRESSIONS = frozenset(
    {
        A_Expr_Kind.AEXPR_OP,
        A_Expr_Kind.AEXPR_OP_ANY,
        A_Expr_Kind.AEXPR_OP_ALL,
        A_Expr_Kind.AEXPR_DISTINCT,
        A_Expr_Kind.AEXPR_NOT_DISTINCT,
        A_Expr_Kind.AEXPR_NULLIF,
        A_Expr_Kind.AEXPR_IN,
        A_Expr_Kind.AEXPR_LIKE,
        A_Expr_Kind.AEXPR_ILIKE,
        A_Expr_Kind.AEXPR_SIMILAR,
        A_Expr_Kind.AEXPR_BETWEEN,
        A_Expr_Kind.AEXPR_NOT_BETWEEN,
        A_Expr_Kind.AEXPR_BETWEEN_SYM,
        A_Expr_Kind.AEXPR_NOT_BETWEEN_SYM,
    }
)
#: The current date and time (``CURRENT_DATE``, ``LOCALTIMESTAMP``...), not the user's
#: or the catalog's names.
_CLOCKS = frozenset(
    {
        SQLValueFunctionOp.SVFOP_CURRENT_DATE,
        SQLValueFunctionOp.SVFOP_CURRENT_TIME,
        SQLValueFunctionOp.SVFOP_CURRENT_TIME_N,
        SQLValueFunctionOp.SVFOP_CURRENT_TIMESTAMP,
        SQLValueFunctionOp.SVFOP_CURRENT_TIMESTAMP_N,
        SQLValueFunctionOp.SVFOP_LOCALTIME,
        SQLValueFunctionOp.SVFOP_LOCALTIME_N,
        SQLValueFunctionOp.SVFOP_LOCALTIMESTAMP,
        SQLValueFunctionOp.SVFOP_LOCALTIMESTAMP_N,
    }
)
_CATALOG = "pg_catalog"
#: What the filter is parsed inside.
_WRAPPED = "SELECT WHERE ("


def check_tree(text: str) -> None:
    """:class:`FilterError` naming the first thing in ``text`` (one expression, checked
    first) that a filter may not contain."""
    try:
        statements = parse_sql(_WRAPPED + text + ")")
    except ParseError as exc:
        message, at = (*exc.args, None)[:2]
        where = f" at character {at - len(_WRAPPED) + 1}" if isinstance(at, int) else ""
        raise FilterError(f"it is not valid SQL: {message}{where}") from None
    select = statements[0].stmt if len(statements) == 1 else None
    if (
        not isinstance(select, ast.SelectStmt)
        or select.op != SetOperation.SETOP_NONE
        or select.fromClause
        or select.targetList
    ):
        raise FilterError("it must be one expression")  # the lexical check makes it one
    _check(select.whereClause)


def _check(node: Any) -> None:
    if node is None or isinstance(node, ast.A_Const):
        return
    if isinstance(node, tuple):
        _each(node)
    elif isinstance(node, ast.ColumnRef):
        # `t.f` and `col.f` can be PostgreSQL's function-call notation, f(t) or f(col)
        if len(node.fields) != 1 or not isinstance(node.fields[0], ast.String):
            raise FilterError("a column is named by its plain name (no table, no '*', no '.f')")
    elif isinstance(node, ast.A_Expr):
        _operator(node)
    elif isinstance(node, ast.BoolExpr):
        _each(node.args)
    elif isinstance(node, ast.NullTest | ast.BooleanTest):
        _check(node.arg)
    elif isinstance(node, ast.FuncCall):
        _function(node)
    elif isinstance(node, ast.TypeCast):
        _type(node.typeName)
        _check(node.arg)
    elif isinstance(node, ast.CaseExpr):
        _each((node.arg, node.defresult))
        for when in node.args:
            _each((when.expr, when.result))
    elif isinstance(node, ast.CoalesceExpr | ast.MinMaxExpr | ast.RowExpr):
        _each(node.args)
    elif isinstance(node, ast.A_ArrayExpr):
        _each(node.elements)
    elif isinstance(node, ast.A_Indirection):
        _check(node.arg)
        for step in node.indirection:
            if not isinstance(step, ast.A_Indices):  # (col).f can call f(col)
                raise FilterError("only subscripts may follow a value ('[i]', not '.f')")
            _each((step.lidx, step.uidx))
    elif isinstance(node, ast.CollateClause):
        _check(node.arg)
    elif isinstance(node, ast.SQLValueFunction):
        if node.op not in _CLOCKS:
            raise FilterError("of the SQL value functions, a filter may use the date and time")
    elif isinstance(node, ast.SubLink):
        raise FilterError("a subquery is not allowed: a filter reads its own table only")
    elif isinstance(node, ast.ParamRef):
        raise FilterError("a parameter ($n) is not allowed")
    else:
        raise FilterError(f"{type(node).__name__} is not allowed in a filter")


def _each(nodes: Iterable[Any] | None) -> None:
    for node in nodes or ():
        _check(node)


def _operator(node: ast.A_Expr) -> None:
    if node.kind not in _EXPRESSIONS:
        raise FilterError(f"the expression {node.kind.name} is not allowed")
    names = [n.sval for n in node.name]
    if len(names) > 1 and names[:-1] != [_CATALOG]:
        raise FilterError(f"the operator {'.'.join(names)} is not allowed: only built-in ones")
    _each((node.lexpr, node.rexpr))


def _function(node: ast.FuncCall) -> None:
    names = [n.sval for n in node.funcname]
    name = ".".join(names)
    if len(names) > 1 and names[:-1] != [_CATALOG] or names[-1] not in FUNCTIONS:
        raise FilterError(
            f"the function {name} is not allowed: a filter may call built-in functions that "
            "read only their arguments (see Security, What a filter may contain)"
        )
    if node.agg_star or node.agg_distinct or node.agg_order or node.agg_filter or node.over:
        raise FilterError(f"{name}: aggregates and window functions are not allowed")
    if node.func_variadic:
        raise FilterError(f"{name}: VARIADIC is not allowed")
    _each(node.args)


def _type(name: ast.TypeName) -> None:
    names = [n.sval for n in name.names]
    if (len(names) > 1 and names[:-1] != [_CATALOG]) or names[-1] not in TYPES:
        raise FilterError(f"a cast to {'.'.join(names)} is not allowed")
    if name.setof or name.pct_type:
        raise FilterError("a cast may not name another column's type")
    _each(name.typmods)
