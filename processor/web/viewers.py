"""What a viewer's token is not shown: key values and row contents (personal data).

Primary-key values and rows can be personal data: an email address as a key, a dead
letter's whole row. The operator's token sees them; a viewer's answer has each field
that holds them set to ``null`` (:func:`for_viewer`), at any depth, so the answer keeps
its shape and its schema. The guard (:mod:`processor.web.guard`) records the role of
every request it lets through (:mod:`processor.web.who`).
"""

from __future__ import annotations

from typing import Any

from processor.web.who import ROLE, recorded

#: The fields that hold key values, a filter (which names values), row contents, or who
#: a person is: in snapshot status and progress, notifications, the offsets document,
#: dead letters and the audit trail.
PERSONAL = frozenset(
    {
        "condition",
        "keys",
        "last_key",
        "maximum_key",
        "after",
        "upto",
        "last_processed_key",
        "incremental_snapshot_primary_key",
        "incremental_snapshot_maximum_key",
        "incremental_snapshot_collections_additional_condition",
        "key_preview",
        "value_preview",
        "key_base64",
        "value_base64",
        # the audit trail's: a client's address, a request's body
        "address",
        "detail",
        # errors: the source's messages can quote a row's value
        "error",
        "waiting",
    }
)


def for_viewer(document: Any) -> Any:
    """``document`` with every :data:`PERSONAL` field, at any depth, set to ``None``."""
    if isinstance(document, dict):
        return {
            name: None if name in PERSONAL else for_viewer(value)
            for name, value in document.items()
        }
    if isinstance(document, list):
        return [for_viewer(item) for item in document]
    return document


def shown_to(request: Any, document: Any) -> Any:
    """``document`` as ``request``'s role may see it: whole for the operator."""
    return document if recorded(request, ROLE) == "operator" else for_viewer(document)
