"""Question templates: question text plus the relation paths that lead to the answers.

A relation followed from tail to head is written ``rel^-1`` (see :func:`invert_path`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rg.data.synthetic.config import QuestionKind
from rg.data.synthetic.vocab import (
    BUDGET,
    CAPITAL,
    CONTAINED_BY,
    DATE_FOUNDED,
    DATE_OF_BIRTH,
    DIRECTED_BY,
    EDUCATION,
    EDUCATION_INSTITUTION,
    EMPLOYMENT_HISTORY,
    FOUNDERS,
    GENRE,
    INVERSE_SUFFIX,
    MARRIAGE_FROM,
    MARRIAGE_SPOUSE,
    NATIONALITY,
    PERFORMANCE_ACTOR,
    PLACE_FOUNDED,
    PLACE_OF_BIRTH,
    POPULATION,
    PROFESSION,
    RELEASE_DATE,
    RUNTIME,
    SPOUSE_S,
    STARRING,
    TENURE_COMPANY,
    TENURE_TITLE,
    WRITTEN_BY,
)


@dataclass(frozen=True)
class QuestionTemplate:
    """A question pattern whose answers are found by walking relation paths.

    Attributes:
        name: Stable identifier of the template.
        text: Question text; ``{0}`` (and ``{1}``) are replaced by the topic entities.
        topic_types: Entity type of each topic entity.
        paths: One relation path per topic entity (``rel^-1`` walks tail to head).
    """

    name: str
    text: str
    topic_types: tuple[str, ...]
    paths: tuple[tuple[str, ...], ...]

    @property
    def hops(self) -> int:
        """Length of the longest relation path."""
        return max(len(p) for p in self.paths)

    @property
    def kind(self) -> QuestionKind:
        """The question kind this template counts towards in :class:`QuestionMix`."""
        if len(self.paths) > 1:
            return "multi_entity"
        return ("one_hop", "two_hop", "three_hop")[self.hops - 1]


def _inv(relation: str) -> str:
    return relation + INVERSE_SUFFIX


def _t(name: str, text: str, types: tuple[str, ...], *paths: tuple[str, ...]) -> QuestionTemplate:
    return QuestionTemplate(name=name, text=text, topic_types=types, paths=tuple(paths))


TEMPLATES: tuple[QuestionTemplate, ...] = (
    # 1 hop, forward.
    _t("film_director", "Who directed {0}?", ("film",), (DIRECTED_BY,)),
    _t("film_writer", "Who wrote the screenplay of {0}?", ("film",), (WRITTEN_BY,)),
    _t("film_genre", "What genre is {0}?", ("film",), (GENRE,)),
    _t("person_birthplace", "Where was {0} born?", ("person",), (PLACE_OF_BIRTH,)),
    _t("person_nationality", "What is the nationality of {0}?", ("person",), (NATIONALITY,)),
    _t("person_profession", "What does {0} do for a living?", ("person",), (PROFESSION,)),
    _t("city_country", "Which country is {0} in?", ("city",), (CONTAINED_BY,)),
    _t("country_capital", "What is the capital of {0}?", ("country",), (CAPITAL,)),
    _t("company_founders", "Who founded {0}?", ("company",), (FOUNDERS,)),
    # 1 hop, backward.
    _t("person_directed_films", "Which films did {0} direct?", ("person",), (_inv(DIRECTED_BY),)),
    _t("city_births", "Who was born in {0}?", ("city",), (_inv(PLACE_OF_BIRTH),)),
    # 1 hop, literal answers.
    _t("person_birth_date", "When was {0} born?", ("person",), (DATE_OF_BIRTH,)),
    _t("film_release_date", "When was {0} released?", ("film",), (RELEASE_DATE,)),
    _t("film_runtime", "How many minutes long is {0}?", ("film",), (RUNTIME,)),
    _t("film_budget", "What was the budget of {0}?", ("film",), (BUDGET,)),
    _t("city_population", "What is the population of {0}?", ("city",), (POPULATION,)),
    _t("company_founding_date", "When was {0} founded?", ("company",), (DATE_FOUNDED,)),
    # 2 hops (through CVTs, chains, backward, literals).
    _t("person_spouse", "Who has {0} been married to?", ("person",), (SPOUSE_S, MARRIAGE_SPOUSE)),
    _t("person_wedding_date", "When did {0} get married?", ("person",), (SPOUSE_S, MARRIAGE_FROM)),
    _t("person_employers", "Which companies has {0} worked for?", ("person",),
       (EMPLOYMENT_HISTORY, TENURE_COMPANY)),
    _t("person_job_titles", "Which job titles has {0} held?", ("person",),
       (EMPLOYMENT_HISTORY, TENURE_TITLE)),
    _t("person_universities", "Which university did {0} attend?", ("person",),
       (EDUCATION, EDUCATION_INSTITUTION)),
    _t("film_cast", "Who starred in {0}?", ("film",), (STARRING, PERFORMANCE_ACTOR)),
    _t("actor_films", "Which films did {0} act in?", ("person",),
       (_inv(PERFORMANCE_ACTOR), _inv(STARRING))),
    _t("person_birth_country", "In which country was {0} born?", ("person",),
       (PLACE_OF_BIRTH, CONTAINED_BY)),
    _t("film_director_birth_date", "When was the director of {0} born?", ("film",),
       (DIRECTED_BY, DATE_OF_BIRTH)),
    _t("company_staff", "Who has worked at {0}?", ("company",),
       (_inv(TENURE_COMPANY), _inv(EMPLOYMENT_HISTORY))),
    _t("city_native_directors_films", "Which films were directed by people born in {0}?",
       ("city",), (_inv(PLACE_OF_BIRTH), _inv(DIRECTED_BY))),
    # 3 hops.
    _t("film_director_birth_country", "In which country was the director of {0} born?",
       ("film",), (DIRECTED_BY, PLACE_OF_BIRTH, CONTAINED_BY)),
    _t("person_spouse_birthplace", "Where was the spouse of {0} born?", ("person",),
       (SPOUSE_S, MARRIAGE_SPOUSE, PLACE_OF_BIRTH)),
    _t("person_employer_founding_city", "In which city were the companies {0} worked for founded?",
       ("person",), (EMPLOYMENT_HISTORY, TENURE_COMPANY, PLACE_FOUNDED)),
    _t("person_university_city", "In which city is the university {0} attended?", ("person",),
       (EDUCATION, EDUCATION_INSTITUTION, CONTAINED_BY)),
    _t("person_birth_continent", "On which continent was {0} born?", ("person",),
       (PLACE_OF_BIRTH, CONTAINED_BY, CONTAINED_BY)),
    _t("film_cast_nationalities", "What nationalities do the actors of {0} have?", ("film",),
       (STARRING, PERFORMANCE_ACTOR, NATIONALITY)),
    _t("actor_directors", "Which directors has {0} acted for?", ("person",),
       (_inv(PERFORMANCE_ACTOR), _inv(STARRING), DIRECTED_BY)),
    # Two topic entities: the answers lie at the end of both paths.
    _t("film_by_director_with_actor", "Which film directed by {0} starred {1}?",
       ("person", "person"), (_inv(DIRECTED_BY),), (_inv(PERFORMANCE_ACTOR), _inv(STARRING))),
    _t("native_alumni", "Who was born in {0} and studied at {1}?", ("city", "university"),
       (_inv(PLACE_OF_BIRTH),), (_inv(EDUCATION_INSTITUTION), _inv(EDUCATION))),
    _t("genre_films_by_writer", "Which {0} films did {1} write?", ("genre", "person"),
       (_inv(GENRE),), (_inv(WRITTEN_BY),)),
)


def invert_path(path: Sequence[str]) -> tuple[str, ...]:
    """Return the path walked backwards: reversed, each step's direction flipped."""
    return tuple(
        r[: -len(INVERSE_SUFFIX)] if r.endswith(INVERSE_SUFFIX) else r + INVERSE_SUFFIX
        for r in reversed(path)
    )
