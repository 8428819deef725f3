"""The API's GET parameters: the allowed ones, ``limit`` and ``whole`` checked, the rest refused."""

from __future__ import annotations

import pytest

from processor.api import DEAD_LETTER_PARAMS, query_params
from processor.errors import BadRequestError


def test_the_parameters_given_are_read_and_the_others_default() -> None:
    assert query_params({}, DEAD_LETTER_PARAMS, 1000) == {
        "table": None,
        "kind": None,
        "limit": 100,
        "whole": False,
    }
    given = {"table": "public.items", "kind": "malformed", "limit": "5", "whole": "TRUE"}
    assert query_params(given, DEAD_LETTER_PARAMS, 1000) == {
        "table": "public.items",
        "kind": "malformed",
        "limit": 5,
        "whole": True,
    }
    assert query_params({"request": ""}, {"request", "limit"}, 10)["request"] is None


@pytest.mark.parametrize(
    "given",
    [
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "-1"},
        {"limit": "1e3"},
        {"limit": "²"},  # a digit to str.isdigit, not to int()
        {"whole": "yes"},
        {"x": "1"},
    ],
)
def test_a_bad_value_or_an_unknown_parameter_is_refused(given: dict[str, str]) -> None:
    with pytest.raises(BadRequestError):
        query_params(given, DEAD_LETTER_PARAMS, 1000)
