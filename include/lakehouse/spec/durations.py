"""The declaration error, the duration syntax and the added-later field rule every declaration
shares."""

from __future__ import annotations

import re
from datetime import timedelta

from lakehouse.core.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+)\s*(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Metadata of a declaration field added after tables were deployed with it absent: a code version
# (``lakehouse.plan.compatibility.code_version``) hashes it only when it is set, so an upgrade
# does not make every deployed flow's code new.
ADDED_LATER = "lakehouse_added_later"


class SpecError(UsageError):
    """A pipeline declaration is invalid; the message says what, where and how to fix it."""


def parse_duration(text: str, where: str) -> timedelta:
    """``"10 minutes"`` -> ``timedelta(minutes=10)``; the same syntax Spark's watermarks take."""
    match = _DURATION.match(text or "")
    if not match:
        raise SpecError(
            f"{where}: {text!r} is not a duration; write e.g. '30 seconds', '10 minutes', '2 hours'"
        )
    return timedelta(seconds=int(match[1]) * _UNIT_SECONDS[match[2].lower()])


def optional_duration(text: str | None, where: str) -> timedelta:
    """A duration that may be left out (zero)."""
    return parse_duration(text, where) if text else timedelta(0)
