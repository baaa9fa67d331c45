"""Entity-name conventions shared by every component."""

from __future__ import annotations

import re

UNNAMED_ID = re.compile(r"[mg]\.[0-9a-z_]+")
"""A bare Freebase machine id such as ``m.0abc`` or ``g.11b6`` (CVT and unnamed nodes).
Matched against the whole name, so real names like ``m. night shyamalan`` stay named."""


def is_unnamed(name: str) -> bool:
    """Whether an entity is a bare Freebase machine id, which has no text of its own."""
    return UNNAMED_ID.fullmatch(name) is not None
