"""Generate a synthetic KG with its questions: build the world, then sample the questions."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from rg.data.sample import Question, Triple
from rg.data.synthetic.config import SyntheticConfig
from rg.data.synthetic.io import write_kg_folder
from rg.data.synthetic.kg import KGBuilder
from rg.data.synthetic.questions import EdgeIndex, QuestionSampler


@dataclass(frozen=True)
class SyntheticKG:
    """A generated KG with its questions.

    Attributes:
        triples: The global KG as ``(head, relation, tail)`` strings; no duplicates.
        questions: Template questions with gold answers, hops and relation paths.
        entity_types: Entity name → type (``person``, ``film``, ..., ``type`` for notable-type
            nodes, ``cvt`` for ``m.`` nodes, ``literal`` for dates and numbers).
    """

    triples: tuple[Triple, ...]
    questions: tuple[Question, ...]
    entity_types: dict[str, str]

    def write(self, folder: str | Path) -> None:
        """Write ``kg.txt`` and ``questions.jsonl`` into ``folder``; see :func:`write_kg_folder`."""
        write_kg_folder(folder, self.triples, self.questions)


def generate(config: SyntheticConfig | None = None) -> SyntheticKG:
    """Generate the synthetic KG and its questions.

    Args:
        config: Sizes, rates and question mix; the defaults when None.

    Returns:
        The KG, its questions and the entity types; identical for identical configs.

    Raises:
        ValueError: if the KG is too small to yield the requested number of distinct questions
            of some kind.
    """
    config = config or SyntheticConfig()
    builder = KGBuilder(config, random.Random(f"rg-synthetic:{config.seed}:kg"))
    triples, entity_types = builder.build()
    sampler = QuestionSampler(
        config, EdgeIndex(triples), entity_types, random.Random(f"rg-synthetic:{config.seed}:q")
    )
    return SyntheticKG(triples=triples, questions=sampler.sample(), entity_types=entity_types)
