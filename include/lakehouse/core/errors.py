"""The two kinds of error a person sees: their input was wrong, or an operation failed.

Every error the platform raises for people (not for bugs) derives from one of these, so the CLI
reports it in one readable line with the right exit code without knowing every module's errors.
"""


class UsageError(ValueError):
    """The input was wrong (a declaration, an option, a missing set-up step); exit code 2.
    The message says what, where and how to fix it."""


class OperationFailed(RuntimeError):
    """The input was fine but the operation did not succeed (a flow failed, a driver did not
    start, a query was rejected); exit code 1."""
