"""Entity linking from raw questions: PrivGemo's topic entity recognition and DRM alignment.

A :class:`~rg.linking.index.NameIndex` holds every named entity of a KG (from any
:class:`~rg.stores.KGStore`) under its normalised name, with a FAISS index over name embeddings.
An :class:`~rg.linking.linker.EntityLinker` finds mention candidates among a question's word
n-grams, matches them exactly (surface, normalised, alias) and aligns the rest densely, and
returns scored topic entities, with ambiguity and failures made explicit. See ``docs/linking.md``.
"""

from rg.linking.config import LinkingConfig, linking_setting
from rg.linking.index import NameIndex, load_or_build_index
from rg.linking.linker import Candidate, EntityLinker, LinkResult, Mention

__all__ = ["Candidate", "EntityLinker", "LinkResult", "LinkingConfig", "Mention", "NameIndex", "linking_setting",
           "load_or_build_index"]
