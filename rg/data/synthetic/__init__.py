"""A synthetic Freebase-like knowledge graph with template questions: rg's offline dataset.

The generator builds a small world of typed, human-readable entities (people, films, cities,
countries, continents, companies, universities and a few small vocabularies such as genres and
professions) linked by Freebase-style dotted relations. It reproduces the features of Freebase
that KG-RAG methods have to cope with:

- unnamed compound-value-type (CVT) nodes with ``m.``-style ids (marriages, employment tenures,
  education records, film performances), so many facts are two hops away;
- literal tail entities: dates (``"1987-03-02"``) and numbers (population, runtime, budget);
- parallel relations, i.e. two relations between the same pair (a person who both
  ``film.film.directed_by`` and ``film.film.written_by`` the same film);
- type triples (``common.topic.notable_types``).

Questions are instances of :data:`TEMPLATES`; their gold answers are computed by following the
template's relation paths over the generated KG, so they are correct by construction. A relation
followed from tail to head is written ``rel^-1``. A walk never re-enters a topic entity (so "who
is X married to?" through the marriage CVT does not answer X itself); for two topic entities the
answers are the intersection of both walks.

Example::

    kg = generate(SyntheticConfig(seed=3))
    kg.write("out/synthetic")            # kg.txt + questions.jsonl
    triples, questions = read_kg_folder("out/synthetic")

Modules: ``config`` (SyntheticConfig, QuestionMix), ``vocab`` (relation names, word lists),
``templates`` (QuestionTemplate, TEMPLATES), ``kg`` (the KG builder), ``questions`` (the question
sampler), ``generator`` (SyntheticKG, generate), ``io`` (kg.txt + questions.jsonl).
"""

from rg.data.synthetic.config import QuestionKind, QuestionMix, SyntheticConfig
from rg.data.synthetic.generator import SyntheticKG, generate
from rg.data.synthetic.io import KG_FILE, QUESTIONS_FILE, read_kg_folder, write_kg_folder
from rg.data.synthetic.templates import TEMPLATES, QuestionTemplate, invert_path
from rg.data.synthetic.vocab import INVERSE_SUFFIX

__all__ = [
    "INVERSE_SUFFIX",
    "KG_FILE",
    "QUESTIONS_FILE",
    "TEMPLATES",
    "QuestionKind",
    "QuestionMix",
    "QuestionTemplate",
    "SyntheticConfig",
    "SyntheticKG",
    "generate",
    "invert_path",
    "read_kg_folder",
    "write_kg_folder",
]
