"""The operators' console: a single page served by the processor on its web port.

It uses the management API (:mod:`processor.api`) and nothing else, with a session
cookie instead of the bearer token (:mod:`processor.web.sessions`); its files
(``static/``) ship inside the package and load nothing from elsewhere.
"""
