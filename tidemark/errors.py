"""One error hierarchy for the whole product.

The command line turns a :class:`TidemarkError` into a one-line message and exit
code 2; anything else is a bug and keeps its traceback.
"""


class TidemarkError(Exception):
    """Root of every error Tidemark raises on purpose."""


class ConfigError(TidemarkError):
    """The configuration file or an environment override is invalid."""


class DevStackError(TidemarkError):
    """A component of the embedded development stack could not start or stop."""


class MissingJavaError(DevStackError):
    """No usable Java runtime (17 or newer) was found."""


class PortInUseError(DevStackError):
    """A configured port is already taken by another process."""
