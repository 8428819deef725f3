"""The generators of the site's reference pages, as pure functions of the code.

``docs/gen/reference.py`` (run by the ``gen-files`` plugin of ``mkdocs.yml``) writes
their pages into the site; ``tests/unit/test_reference_docs.py`` calls them without
mkdocs. Each module renders one page and raises :class:`MissingDescriptionError`
for anything it would have to publish without a description.
"""
