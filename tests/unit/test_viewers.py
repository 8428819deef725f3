"""A viewer's answers keep their shape without key values or rows (personal data)."""

from __future__ import annotations

from processor.web.viewers import for_viewer, shown_to
from processor.web.who import ROLE

STATUS = {
    "paused": False,
    "tables": [
        {
            "table": "public.users",
            "status": "running",
            "condition": "email = 'ann@example.org'",
            "keys": [{"email": "ann@example.org"}],
            "last_key": ["ann@example.org"],
            "maximum_key": ["zoe@example.org"],
            "ranges": [{"after": ["ann@example.org"], "upto": ["bob@example.org"], "rows": 3}],
            "rows": 12,
            "error": None,
        }
    ],
}


def test_a_viewer_sees_no_key_value_filter_or_row_but_everything_else() -> None:
    shown = for_viewer(STATUS)
    [table] = shown["tables"]
    assert "example.org" not in repr(shown)
    assert table["condition"] is table["keys"] is table["last_key"] is table["maximum_key"] is None
    assert table["ranges"] == [{"after": None, "upto": None, "rows": 3}]
    assert (table["table"], table["status"], table["rows"]) == ("public.users", "running", 12)
    assert STATUS["tables"][0]["last_key"] == ["ann@example.org"]  # not changed in place
    letter = {"kind": "malformed", "key_preview": "ann", "value_base64": "eA==", "value_bytes": 1}
    assert for_viewer({"dead_letters": [letter]})["dead_letters"] == [
        {"kind": "malformed", "key_preview": None, "value_base64": None, "value_bytes": 1}
    ]


def test_the_operator_sees_the_document_whole_and_an_unknown_role_as_a_viewer() -> None:
    assert shown_to({ROLE: "operator"}, STATUS) is STATUS
    assert shown_to({ROLE: "viewer"}, STATUS) == for_viewer(STATUS)
    assert shown_to({}, STATUS) == for_viewer(STATUS)
