"""The privacy boundary between the Hand (raw KG) and the Brain (anonymised view): PrivGemo §4.1.

- :class:`PrivacySession`: per-question keyed pseudonyms, anonymised triples and questions, the
  inverse map (:mod:`rg.privacy.session`);
- :class:`KGSchema`: coarse types and relation clusters computed once per KG (:mod:`rg.privacy.schema`);
- :class:`EgressGuard`: the check every Brain-bound request passes (:mod:`rg.privacy.guard`);
- :class:`ExposureLedger`: what each question's Brain calls revealed (:mod:`rg.privacy.exposure`);
- :func:`sanitise`, :func:`structural_uniqueness`: the structure sanitiser and its measure
  (:mod:`rg.privacy.structure`).
"""

from rg.privacy.brain import brain_client
from rg.privacy.config import PrivacyConfig, PrivacyMode
from rg.privacy.exposure import ExposureLedger, ExposureTotals
from rg.privacy.guard import EgressGuard, EgressRefused
from rg.privacy.schema import KGSchema, TypingConfig, derive_types
from rg.privacy.session import MaskedQuestion, PrivacySession, SessionClosed, literal_view
from rg.privacy.structure import (
    SanitisedView,
    SanitiserConfig,
    StructureReport,
    Uniqueness,
    assess,
    sanitise,
    structural_uniqueness,
)

__all__ = [
    "EgressGuard",
    "brain_client",
    "EgressRefused",
    "ExposureLedger",
    "ExposureTotals",
    "KGSchema",
    "MaskedQuestion",
    "PrivacyConfig",
    "PrivacyMode",
    "PrivacySession",
    "SanitisedView",
    "SanitiserConfig",
    "SessionClosed",
    "StructureReport",
    "TypingConfig",
    "Uniqueness",
    "assess",
    "derive_types",
    "literal_view",
    "sanitise",
    "structural_uniqueness",
]
