"""Settings of the privacy boundary."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rg.config import Config

PrivacyMode = Literal["plaintext", "utility", "privacy"]


class PrivacyConfig(Config):
    """How much of the raw KG the Brain may see (PrivGemo §4.1).

    ``plaintext``: nothing is anonymised and nothing is guarded (the baseline to measure against).
    ``utility``: entities, literals and question mentions become pseudonyms; relation labels stay.
    ``privacy``: as ``utility``, and relation labels become per-KG schema clusters.
    """

    mode: PrivacyMode = Field("utility", description="`plaintext`, `utility` or `privacy`.")
    ratio: float = Field(
        1.0, ge=0.0, le=1.0,
        description="Share of non-topic entities anonymised (topic entities always are); < 1 traces PrivGemo's "
        "privacy/utility curve. Entities left in the clear are not guarded.",
    )
    pseudonym_chars: int = Field(8, ge=4, le=64, description="Hex characters of a pseudonym (collisions are resolved).")
