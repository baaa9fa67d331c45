"""Paraphrases and same-template questions, for memory rounds (ReMindRAG's Same / Similar / Different).

A :class:`TemplateBank` holds question *families*: each family is one relation path per topic
entity and several wordings of the same question, with ``{0}`` (``{1}``) for the topic entities.

* :func:`synthetic_bank`: the synthetic KG's :data:`rg.data.synthetic.TEMPLATES` (the family is the
  template name, its text the first wording) plus the hand-written wordings of
  :data:`SYNTHETIC_PARAPHRASES` (two more per template);
* :func:`metaqa_bank`: MetaQA's own question templates, read from its question files and their
  ``*_qtype`` files: the family is the question type (``movie_to_director``), the wordings are
  the distinct questions of that type with the bracketed topic replaced by ``{0}``, most frequent
  first (``which person directed [X]``, ``who directed the movie [X]``, ...), and the relation path
  is derived from the type (:func:`qtype_path`).

Given a question and its topic entities, :meth:`TemplateBank.paraphrases` returns other wordings
of its family filled with the same entities (same relation path, different words) and
:meth:`TemplateBank.same_template` returns questions of the same family and wording about other
topic entities, with their answers computed by walking the family's path over a KG (a walk never
re-enters its topic; at most ``max_answers`` answers). Both are deterministic for a given seed: the
order is a ``random.Random`` shuffle seeded by ``"<seed>:<question>"``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.run.paths import resolve_data_path
from rg.data.records import iter_text_lines
from rg.data.sample import Question, Triple
from rg.data.synthetic.questions import EdgeIndex
from rg.data.synthetic.templates import TEMPLATES
from rg.data.synthetic.vocab import INVERSE_SUFFIX

SYNTHETIC_PARAPHRASES: dict[str, tuple[str, ...]] = {
    "film_director": ("Who was the director of {0}?", "Which person directed the film {0}?"),
    "film_writer": ("Who is the screenwriter of {0}?", "Which person wrote the script for {0}?"),
    "film_genre": ("Which genre does {0} belong to?", "What kind of film is {0}?"),
    "person_birthplace": ("What is the birthplace of {0}?", "In which place was {0} born?"),
    "person_nationality": ("Which country is {0} a citizen of?", "What nationality does {0} have?"),
    "person_profession": ("What is the profession of {0}?", "What is {0}'s job?"),
    "city_country": ("In which country is {0} located?", "{0} lies in which country?"),
    "country_capital": ("Which city is the capital of {0}?", "Name the capital city of {0}."),
    "company_founders": ("Who were the founders of {0}?", "Which people started {0}?"),
    "person_directed_films": ("What films were directed by {0}?", "Name the movies {0} directed."),
    "city_births": ("Which people were born in {0}?", "Who is a native of {0}?"),
    "person_birth_date": ("What is the date of birth of {0}?", "On what date was {0} born?"),
    "film_release_date": ("What is the release date of {0}?", "When did {0} come out?"),
    "film_runtime": ("What is the running time of {0} in minutes?", "How long does {0} run, in minutes?"),
    "film_budget": ("How much did {0} cost to make?", "What budget did {0} have?"),
    "city_population": ("How many people live in {0}?", "How large is the population of {0}?"),
    "company_founding_date": ("What is the founding date of {0}?", "In what year was {0} established?"),
    "person_spouse": ("Who is the spouse of {0}?", "Whom did {0} marry?"),
    "person_wedding_date": ("What is the wedding date of {0}?", "On what date did {0} marry?"),
    "person_employers": ("Which employers has {0} had?", "For which companies did {0} work?"),
    "person_job_titles": ("What positions has {0} held?", "Which jobs titles did {0} hold?"),
    "person_universities": ("Where did {0} study?", "Which university is {0} an alumnus of?"),
    "film_cast": ("Which actors appeared in {0}?", "Who was in the cast of {0}?"),
    "actor_films": ("In which films did {0} appear?", "Which movies feature {0} as an actor?"),
    "person_birth_country": ("What is the country of birth of {0}?", "Which country was {0} born in?"),
    "film_director_birth_date": ("What is the birth date of the person who directed {0}?",
                                 "When was {0}'s director born?"),
    "company_staff": ("Which people have been employed by {0}?", "Who has {0} employed?"),
    "city_native_directors_films": ("What films did directors born in {0} make?",
                                    "Which movies have directors from {0} directed?"),
    "film_director_birth_country": ("Which country is the director of {0} from by birth?",
                                    "The director of {0} was born in which country?"),
    "person_spouse_birthplace": ("What is the birthplace of {0}'s spouse?", "Where was the person {0} married born?"),
    "person_employer_founding_city": ("Where were the employers of {0} founded?",
                                      "Which cities were the companies that employed {0} founded in?"),
    "person_university_city": ("Which city is {0}'s university in?", "Where is the university that {0} attended?"),
    "person_birth_continent": ("Which continent is {0} from by birth?", "{0} was born on which continent?"),
    "film_cast_nationalities": ("Which nationalities do the cast members of {0} have?",
                                "What countries are the actors in {0} citizens of?"),
    "actor_directors": ("Which directors has {0} worked with as an actor?", "Who directed films that {0} acted in?"),
    "film_by_director_with_actor": ("Which film by {0} had {1} in it?", "What film starring {1} did {0} direct?"),
    "native_alumni": ("Which person born in {0} went to {1}?", "Who is a native of {0} and an alumnus of {1}?"),
    "genre_films_by_writer": ("Which films of the genre {0} were written by {1}?", "What {0} films has {1} written?"),
}
"""Hand-written wordings of each synthetic template (after its own text), same entities and path."""

QTYPE_RELATIONS: dict[str, str] = {
    "director": "directed_by", "writer": "written_by", "actor": "starred_actors", "year": "release_year",
    "language": "in_language", "genre": "has_genre", "tag": "has_tags", "tags": "has_tags",
    "imdbvotes": "has_imdb_votes", "imdbrating": "has_imdb_rating", "votes": "has_imdb_votes",
    "rating": "has_imdb_rating",
}
"""The MetaQA relation between a movie and each type a question type names."""

_TOPIC = re.compile(r"\[([^\[\]]+)\]")


def qtype_path(qtype: str) -> tuple[str, ...]:
    """The relation path of a MetaQA question type: ``actor_to_movie_to_director`` →
    ``("starred_actors^-1", "directed_by")``.

    Raises:
        ValueError: for a type that does not alternate movie / another known type.
    """
    kinds = qtype.split("_to_")
    path = []
    for a, b in zip(kinds, kinds[1:]):
        if a == "movie" and b in QTYPE_RELATIONS:
            path.append(QTYPE_RELATIONS[b])
        elif b == "movie" and a in QTYPE_RELATIONS:
            path.append(QTYPE_RELATIONS[a] + INVERSE_SUFFIX)
        else:
            raise ValueError(f"MetaQA question type {qtype!r}: no relation between {a!r} and {b!r}")
    if not path:
        raise ValueError(f"MetaQA question type {qtype!r} names no hop")
    return tuple(path)


def _skeleton(question: str, topics: Sequence[str]) -> str:
    """The question with each topic entity replaced by ``{i}`` (first occurrence, in order)."""
    text = question.replace("{", "{{").replace("}", "}}")
    for i, topic in enumerate(topics):
        escaped = topic.replace("{", "{{").replace("}", "}}")
        if escaped not in text:
            return ""
        text = text.replace(escaped, "{" + str(i) + "}", 1)
    return text


def _fill(wording: str, topics: Sequence[str]) -> str:
    return wording.format(*topics)


@dataclass(frozen=True)
class Family:
    """One question family: its relation path per topic entity and its wordings (first: canonical)."""

    name: str
    paths: tuple[tuple[str, ...], ...]
    wordings: tuple[str, ...]


class TemplateBank:
    """Question families and the two generators (module docstring).

    Args:
        families: The families; a wording may belong to one family only.
    """

    def __init__(self, families: Iterable[Family]) -> None:
        self.families = {f.name: f for f in families}
        self._by_wording: dict[str, str] = {}
        for f in self.families.values():
            for w in f.wordings:
                if self._by_wording.setdefault(w, f.name) != f.name:
                    raise ValueError(f"wording {w!r} belongs to families {self._by_wording[w]!r} and {f.name!r}")

    def match(self, question: str, topics: Sequence[str]) -> tuple[Family, str] | None:
        """The family and wording of ``question`` with topic entities ``topics``; None when no wording fits."""
        wording = _skeleton(question, topics)
        name = self._by_wording.get(wording)
        return (self.families[name], wording) if name is not None else None

    def paraphrases(self, question: str, topics: Sequence[str], n: int, seed: int = 0) -> list[str]:
        """Up to ``n`` other wordings of the question's family about the same ``topics`` (seeded order)."""
        found = self.match(question, topics)
        if found is None:
            return []
        family, wording = found
        others = [w for w in family.wordings if w != wording]
        random.Random(f"{seed}:{question}").shuffle(others)
        return [_fill(w, topics) for w in others[:n]]

    def same_template(self, question: str, topics: Sequence[str], triples: Sequence[Triple], n: int,
                      seed: int = 0, max_answers: int = 10) -> list[Question]:
        """Up to ``n`` questions of the same family and wording about other topic entities of ``triples``.

        Only single-topic families: a new topic is any entity with an edge of the path's first
        relation (a relation's domain stands for the type), other than ``topics``; its answers are
        the ends of the path's walks that never re-enter it (1 to ``max_answers`` of them, else it is
        skipped). Ids are ``<family>-<k>``, in the seeded order.
        """
        found = self.match(question, topics)
        if found is None or len(found[0].paths) != 1:
            return []
        family, wording = found
        path = family.paths[0]
        index = EdgeIndex(triples)
        starts = sorted({e for t in triples for e in (t[0], t[2]) if e not in topics and index.step(e, path[0])})
        random.Random(f"{seed}:{question}").shuffle(starts)
        out: list[Question] = []
        for entity in starts:
            if len(out) == n:
                break
            answers = index.follow(entity, path, frozenset({entity}))
            if 1 <= len(answers) <= max_answers:
                out.append(Question(id=f"{family.name}-{len(out)}", question=_fill(wording, (entity,)),
                                    answers=tuple(sorted(answers)), q_entities=(entity,), hops=len(path),
                                    relation_paths=(path,)))
        return out


def synthetic_bank() -> TemplateBank:
    """The synthetic KG's templates with :data:`SYNTHETIC_PARAPHRASES`."""
    missing = sorted({t.name for t in TEMPLATES} - set(SYNTHETIC_PARAPHRASES))
    if missing:
        raise ValueError(f"synthetic templates without paraphrases: {missing}")
    return TemplateBank(Family(t.name, t.paths, (t.text, *SYNTHETIC_PARAPHRASES[t.name])) for t in TEMPLATES)


def metaqa_bank(files: Sequence[tuple[str | Path, str | Path]]) -> TemplateBank:
    """MetaQA's question templates from ``(question file, qtype file)`` pairs (module docstring).

    The topic entity is written without brackets, as :func:`rg.data.metaqa.read_metaqa_questions`
    writes questions. Lines without exactly one ``[topic]`` are skipped. ``@shared/...`` paths are
    inside the shared data folder (:func:`rg.run.paths.resolve_data_path`).
    """
    counts: dict[str, Counter[str]] = {}
    for questions, qtypes in files:
        kinds = [t for _, t in iter_text_lines(resolve_data_path(qtypes))]
        for (_, line), qtype in zip(iter_text_lines(resolve_data_path(questions)), kinds):
            if not isinstance(line, str) or not isinstance(qtype, str):
                continue
            text = line.split("\t", 1)[0]
            if len(_TOPIC.findall(text)) != 1:
                continue
            wording = _TOPIC.sub("{0}", text.replace("{", "{{").replace("}", "}}")).strip()
            counts.setdefault(qtype.strip(), Counter())[wording] += 1
    return TemplateBank(
        Family(qtype, (qtype_path(qtype),), tuple(w for w, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))))
        for qtype, c in sorted(counts.items()))


class ParaphraseConfig(Config):
    """Where the question families of paraphrase / same-template rounds come from."""

    bank: Literal["synthetic", "metaqa"] = Field(
        "synthetic", description="'synthetic': the synthetic KG's templates; 'metaqa': MetaQA's question templates "
        "read from `metaqa_files`.")
    metaqa_files: list[tuple[str, str]] = Field(
        default_factory=list, description="bank metaqa: (question file, qtype file) pairs, `@shared/...` allowed, "
        "e.g. [[@shared/metaqa/qa_test_1hop.txt.gz, @shared/metaqa/qa_test_1hop_qtype.txt.gz], ...].")
    seed: int = Field(0, description="Seed of the paraphrase / entity order.")
    max_answers: int = Field(10, ge=1, description="same_template: skip other entities with more answers than this.")

    @model_validator(mode="after")
    def _metaqa_needs_files(self) -> "ParaphraseConfig":
        if self.bank == "metaqa" and not self.metaqa_files:
            raise ValueError("paraphrase.bank is 'metaqa' but paraphrase.metaqa_files is empty. Fix: list the "
                             "(question file, qtype file) pairs of MetaQA, e.g. qa_test_1hop.txt.gz and "
                             "qa_test_1hop_qtype.txt.gz")
        return self

    def build(self) -> TemplateBank:
        return synthetic_bank() if self.bank == "synthetic" else metaqa_bank(self.metaqa_files)
