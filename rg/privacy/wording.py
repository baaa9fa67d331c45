"""A question as a privacy session masks it for the Brain, made without a Hand: to train the local Brain on.

The dual tower's session masks every KG name a question writes, not only its topics
(:meth:`rg.privacy.session.PrivacySession.mask_question`). Where a KG's names include ordinary words,
the Brain reads ``which movie was TE_1 (person) the ent_90ede01f (has_tags.tail) for``, because
MetaQA tags films with words such as *writer*. A planner trained on the questions as written has
never seen that; :class:`SessionWording` masks training questions the same way, so the local Brain
learns the wording it is sent. It finds the names a question writes with the schema's
:attr:`~rg.privacy.schema.KGSchema.written_names` (every entity whose id is its name, as in a memory
store) and masks them in a fresh session, as the Hand's controller does with the names it found.
Pseudonyms differ per session; :func:`rg.retrievers.planner.prompt.brain_wording` turns them into
``<n>`` in both places.
"""

from __future__ import annotations

from collections.abc import Sequence

from rg.privacy.config import PrivacyConfig
from rg.privacy.schema import KGSchema
from rg.privacy.session import PrivacySession


class SessionWording:
    """``wording(question, topics)``: ``question`` masked as a session in ``mode`` masks it over ``schema``.

    Args:
        schema: The KG's schema (types decide the views; its entities are the names looked for).
        mode: ``utility`` or ``privacy``: which schema words stay public.
        protocol: The Brain protocol's words, public as in the controller's sessions
            (:func:`rg.reasoning.dualtower.prompts.protocol_words`).
    """

    def __init__(self, schema: KGSchema, mode: str = "utility", protocol: frozenset[str] = frozenset()) -> None:
        self.schema = schema
        self.config = PrivacyConfig(mode=mode)
        self.protocol = protocol

    def __call__(self, question: str, topics: Sequence[str]) -> str:
        named = self.schema.written_names.in_text(question)
        with PrivacySession(self.config, self.schema, protocol=self.protocol) as session:
            return session.mask_question(question, list(topics), names=list(named)).text
