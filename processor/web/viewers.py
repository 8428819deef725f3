"""What a viewer's token is not shown: key values and row contents (personal data).

Primary-key values and rows can be personal data: an email address as a key, a dead
letter's whole row. The operator's token sees them; a viewer's answer has each field
that holds them set to ``null`` (:func:`for_viewer`), at any depth, so the answer keeps
its shape and its schema. The guard (:mod:`processor.web.guard`) records the role of
every request it lets through; :func:`role` reads it.
"""

from __future__ import annotations

from typing import Any

#: Where the guard keeps the role of a request it let through.
ROLE = "tidemark.role"
#: The fields that hold key values, a filter (which names values), or row contents: in
#: snapshot status and progress, notifications, the offsets document and dead letters.
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
    }
)


def role(request: Any) -> str | None:
    """``operator`` or ``viewer``: the role the guard let ``request`` through with."""
    try:
        found = request[ROLE]
    except (KeyError, TypeError):
        return None
    return found if isinstance(found, str) else None


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
    return document if role(request) == "operator" else for_viewer(document)
