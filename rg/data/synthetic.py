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
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Sequence

from pydantic import Field, ValidationInfo, field_validator, model_validator

from rg.config import Config
from rg.data.sample import Question, Triple

KG_FILE = "kg.txt"
QUESTIONS_FILE = "questions.jsonl"
INVERSE_SUFFIX = "^-1"

# Relations (Freebase names).
NOTABLE_TYPES = "common.topic.notable_types"
CONTAINED_BY = "location.location.containedby"
CAPITAL = "location.country.capital"
POPULATION = "location.statistical_region.population"
PLACE_OF_BIRTH = "people.person.place_of_birth"
DATE_OF_BIRTH = "people.person.date_of_birth"
NATIONALITY = "people.person.nationality"
GENDER = "people.person.gender"
PROFESSION = "people.person.profession"
SPOUSE_S = "people.person.spouse_s"
MARRIAGE_SPOUSE = "people.marriage.spouse"
MARRIAGE_FROM = "people.marriage.from"
MARRIAGE_TO = "people.marriage.to"
EMPLOYMENT_HISTORY = "people.person.employment_history"
TENURE_COMPANY = "business.employment_tenure.company"
TENURE_TITLE = "business.employment_tenure.title"
TENURE_FROM = "business.employment_tenure.from"
TENURE_TO = "business.employment_tenure.to"
EDUCATION = "people.person.education"
EDUCATION_INSTITUTION = "education.education.institution"
EDUCATION_DEGREE = "education.education.degree"
EDUCATION_END = "education.education.end_date"
DIRECTED_BY = "film.film.directed_by"
WRITTEN_BY = "film.film.written_by"
PRODUCED_BY = "film.film.produced_by"
STARRING = "film.film.starring"
PERFORMANCE_ACTOR = "film.performance.actor"
RELEASE_DATE = "film.film.initial_release_date"
RUNTIME = "film.film.runtime"
BUDGET = "film.film.estimated_budget"
GENRE = "film.film.genre"
FILM_COUNTRY = "film.film.country"
FOUNDERS = "organization.organization.founders"
PLACE_FOUNDED = "organization.organization.place_founded"
DATE_FOUNDED = "organization.organization.date_founded"
EMPLOYEES = "organization.organization.number_of_employees"

# Word lists for names.
FEMALE_FIRST = (
    "Alma", "Beatrix", "Clara", "Daphne", "Elena", "Freya", "Greta", "Hanna", "Ines", "Juno",
    "Katya", "Lotte", "Mira", "Noor", "Olga", "Rosa", "Tilda", "Vera", "Xenia", "Zora",
)
MALE_FIRST = (
    "Anton", "Bruno", "Cyril", "Dario", "Emil", "Felix", "Gideon", "Hugo", "Ivo", "Jonas",
    "Kasper", "Lars", "Matteo", "Nils", "Pavel", "Quinn", "Soren", "Umar", "Wim", "Yusuf",
)
LAST_NAMES = (
    "Verhoeven", "Castellano", "Lindqvist", "Okafor", "Moreau", "Novak", "Haddad", "Brennan",
    "Takahashi", "Kowalski", "Ferreira", "Adeyemi", "Lindgren", "Rossi", "Petrov", "Nakamura",
    "Duarte", "Sorensen", "Calloway", "Whitlock", "Abernathy", "Delacroix", "Halvorsen", "Ibarra",
    "Jansen", "Kettering", "Marchetti", "Nyberg", "Oyelaran", "Quint", "Ravensworth", "Salazar",
    "Thornbury", "Underhill", "Vasquez", "Winslow", "Yamada", "Zeller", "Achterberg", "Bellamy",
)
TITLE_ADJECTIVES = (
    "Silent", "Crimson", "Hollow", "Last", "Burning", "Distant", "Golden", "Broken", "Hidden",
    "Northern", "Quiet", "Restless", "Shattered", "Wandering", "Frozen", "Endless", "Velvet",
    "Iron", "Pale", "Secret", "Lonely", "Electric", "Forgotten", "Midnight", "Scarlet", "Sunken",
)
TITLE_NOUNS = (
    "Harbour", "Orchard", "Garden", "River", "Empire", "Lantern", "Mirror", "Horizon", "Kingdom",
    "Meadow", "Station", "Tide", "Compass", "Signal", "Winter", "Summer", "Crown", "Shadow",
    "Voyage", "Bridge", "Archive", "Engine", "Island", "Promise", "Frontier", "Carnival",
)
TITLE_OF_NOUNS = (
    "Ashes", "Glass", "Thunder", "Salt", "Smoke", "Dust", "Silver", "Rain", "Stars", "Bones",
    "Echoes", "Embers", "Honey", "Wolves", "Tomorrow",
)
CITY_PREFIXES = (
    "Ash", "Bel", "Cor", "Dun", "Eld", "Fen", "Glen", "Hal", "Iver", "Kel", "Lor", "Mar", "Nor",
    "Oak", "Pel", "Quar", "Ros", "Sel", "Tor", "Ul", "Var", "Wes", "Yar", "Zan", "Brim", "Cal",
)
CITY_SUFFIXES = (
    "ford", "haven", "bury", "wick", "mouth", "stead", "field", "more", "port", "vale", "gate",
    "holm", "ridge", "ton", "dale",
)
COUNTRY_PREFIXES = (
    "Val", "Nor", "Ost", "Kar", "Bel", "Thal", "Ard", "Mir", "Sund", "Vel", "Cas", "Eri", "Lum",
    "Zar", "Dor", "Tav",
)
COUNTRY_SUFFIXES = ("oria", "land", "avia", "istan", "enia", "mark")
CONTINENTS = ("Aurelia", "Boreas", "Meridia", "Occidia", "Orientis", "Australis")
COMPANY_STEMS = (
    "North", "Blue", "Silver", "Red", "Bright", "Stone", "Clear", "High", "Star", "Green",
    "Swift", "Deep", "True", "Cedar", "Iron",
)
COMPANY_TAILS = ("wind", "fern", "field", "bridge", "light", "water", "crest", "peak", "vale")
COMPANY_KINDS = (
    "Pictures", "Systems", "Holdings", "Labs", "Media", "Industries", "Studios", "Logistics",
    "Foods", "Energy",
)
UNIVERSITY_PATTERNS = (
    "University of {city}", "{city} Institute of Technology", "{city} State University",
    "{last} College",
)
GENRES = (
    "Drama", "Comedy", "Thriller", "Science Fiction", "Documentary", "Romance", "Horror",
    "Western", "Animation", "Musical", "Crime Fiction", "Adventure",
)
FILM_PROFESSIONS = ("Film Director", "Screenwriter", "Film Producer", "Actor")
OTHER_PROFESSIONS = (
    "Engineer", "Physician", "Lawyer", "Teacher", "Journalist", "Architect", "Economist",
    "Musician",
)
JOB_TITLES = (
    "Chief Executive Officer", "Chief Technology Officer", "Software Engineer", "Accountant",
    "Product Manager", "Research Scientist", "Sales Director", "Designer",
)
DEGREES = (
    "Bachelor of Arts", "Bachelor of Science", "Master of Science", "Master of Fine Arts",
    "Doctor of Philosophy", "Juris Doctor",
)
GENDERS = ("Female", "Male")

# Entity kind → name of its notable-type node.
NOTABLE_TYPE_NAMES = (
    ("person", "Person"), ("film", "Film"), ("city", "City/Town"), ("country", "Country"),
    ("continent", "Continent"), ("company", "Organization"), ("university", "College/University"),
    ("genre", "Film genre"), ("profession", "Profession"), ("job_title", "Job title"),
    ("degree", "Educational Degree"), ("gender", "Gender"),
)

# Freebase mids: "m.0" followed by base-32 digits from this alphabet.
MID_ALPHABET = "0123456789bcdfghjklmnpqrstvwxyz_"
MID_DIGITS = 5
MID_MULTIPLIER = 0x9E3779B1  # odd, hence a bijection modulo 32**MID_DIGITS

QuestionKind = Literal["one_hop", "two_hop", "three_hop", "multi_entity"]


class QuestionMix(Config):
    """Shares of the question kinds; they must sum to 1.

    Attributes:
        one_hop: Single topic entity, relation path of length 1.
        two_hop: Single topic entity, length 2 (many go through a CVT node).
        three_hop: Single topic entity, length 3.
        multi_entity: Two topic entities; answers are the intersection of two paths.
    """

    one_hop: float = Field(0.3, ge=0.0, le=1.0)
    two_hop: float = Field(0.3, ge=0.0, le=1.0)
    three_hop: float = Field(0.25, ge=0.0, le=1.0)
    multi_entity: float = Field(0.15, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sums_to_one(self) -> "QuestionMix":
        total = self.one_hop + self.two_hop + self.three_hop + self.multi_entity
        if abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"mix shares one_hop + two_hop + three_hop + multi_entity sum to {total:g}; "
                "set them so that they sum to 1"
            )
        return self

    def share(self, kind: QuestionKind) -> float:
        """Return the share of ``kind``."""
        return float(getattr(self, kind))


class SyntheticConfig(Config):
    """Size and shape of the synthetic Freebase-like KG and its questions.

    The defaults give a KG of a few thousand triples and 200 questions in well under a second.

    Attributes:
        seed: Random seed; the same config always yields byte-identical output.
        people: Number of people.
        films: Number of films.
        cities: Number of cities (at least one per country).
        countries: Number of countries.
        continents: Number of continents (at most 6).
        companies: Number of companies.
        universities: Number of universities.
        director_share: Share of people in the pool films draw directors from.
        writer_share: Share of people in the screenwriter pool.
        producer_share: Share of people in the producer pool.
        actor_share: Share of people in the actor pool.
        cast_size: Actors per film (film performance CVTs).
        co_director_rate: Probability that a film has a second director.
        parallel_relation_rate: Probability that a film's director is also its writer, and
            (independently) also its producer: two relations between the same (film, person)
            pair.
        marriage_rate: Share of people who are married (pairs of people, one marriage CVT each).
        divorce_rate: Probability that a marriage has an end date.
        employment_rate: Share of people with employment tenures (1-2 CVTs each).
        education_rate: Share of people with a university education record (CVT).
        questions: Number of questions to generate.
        mix: Shares of 1-, 2-, 3-hop and two-topic-entity questions.
        max_answers: Template instances with more answers than this are skipped.
        max_attempts: Template instances tried per requested question before generation fails.
    """

    KIND: ClassVar[str] = "synthetic"

    seed: int = 0
    people: int = Field(200, ge=10)
    films: int = Field(100, ge=1)
    cities: int = Field(30, ge=1)
    countries: int = Field(8, ge=1)
    continents: int = Field(3, ge=1, le=len(CONTINENTS))
    companies: int = Field(20, ge=1)
    universities: int = Field(10, ge=1)
    director_share: float = Field(0.12, gt=0.0, le=1.0)
    writer_share: float = Field(0.1, gt=0.0, le=1.0)
    producer_share: float = Field(0.08, gt=0.0, le=1.0)
    actor_share: float = Field(0.35, gt=0.0, le=1.0)
    cast_size: int = Field(4, ge=1)
    co_director_rate: float = Field(0.1, ge=0.0, le=1.0)
    parallel_relation_rate: float = Field(0.3, ge=0.0, le=1.0)
    marriage_rate: float = Field(0.35, ge=0.0, le=1.0)
    divorce_rate: float = Field(0.25, ge=0.0, le=1.0)
    employment_rate: float = Field(0.6, ge=0.0, le=1.0)
    education_rate: float = Field(0.5, ge=0.0, le=1.0)
    questions: int = Field(200, ge=0)
    mix: QuestionMix = QuestionMix()
    max_answers: int = Field(10, ge=1)
    max_attempts: int = Field(50, ge=1)

    @field_validator("countries")
    @classmethod
    def _a_city_per_country(cls, countries: int, info: ValidationInfo) -> int:
        cities = info.data.get("cities")
        if cities is not None and cities < countries:
            raise ValueError(
                f"countries ({countries}) exceeds cities ({cities}); every country needs a "
                "city: lower countries or raise cities"
            )
        return countries

    @field_validator("cast_size")
    @classmethod
    def _cast_fits_actor_pool(cls, cast_size: int, info: ValidationInfo) -> int:
        people, share = info.data.get("people"), info.data.get("actor_share")
        if people is not None and share is not None and cast_size > _pool_size(people, share):
            raise ValueError(
                f"cast_size ({cast_size}) exceeds the actor pool ({_pool_size(people, share)} = "
                "people × actor_share); lower cast_size or raise actor_share"
            )
        return cast_size


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
    builder = _KGBuilder(config, random.Random(f"rg-synthetic:{config.seed}:kg"))
    triples, entity_types = builder.build()
    sampler = _QuestionSampler(
        config, _Index(triples), entity_types, random.Random(f"rg-synthetic:{config.seed}:q")
    )
    return SyntheticKG(triples=triples, questions=sampler.sample(), entity_types=entity_types)


def invert_path(path: Sequence[str]) -> tuple[str, ...]:
    """Return the path walked backwards: reversed, each step's direction flipped."""
    return tuple(
        r[: -len(INVERSE_SUFFIX)] if r.endswith(INVERSE_SUFFIX) else r + INVERSE_SUFFIX
        for r in reversed(path)
    )


def _pool_size(people: int, share: float) -> int:
    return max(1, min(people, round(people * share)))


class _Names:
    """Hands out unique entity names, disambiguating collisions deterministically."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def unique(self, base: str, hint: str | None = None) -> str:
        """Return ``base``, else ``base (hint)``, else ``base (2)``, ``base (3)``, ..."""
        candidates = [base] + ([f"{base} ({hint})"] if hint else [])
        for name in candidates:
            if name not in self._taken:
                self._taken.add(name)
                return name
        n = 2
        while f"{base} ({n})" in self._taken:
            n += 1
        self._taken.add(f"{base} ({n})")
        return f"{base} ({n})"


class _Mids:
    """Distinct ``m.0xxxxx`` ids: an odd multiplier permutes the counter modulo 32**5."""

    def __init__(self, offset: int) -> None:
        self._offset = offset
        self._count = 0

    def allocate(self) -> str:
        """Return a fresh mid."""
        value = (self._count * MID_MULTIPLIER + self._offset) % len(MID_ALPHABET) ** MID_DIGITS
        self._count += 1
        digits = []
        for _ in range(MID_DIGITS):
            value, d = divmod(value, len(MID_ALPHABET))
            digits.append(MID_ALPHABET[d])
        return "m.0" + "".join(reversed(digits))


def _date(rng: random.Random, year: int) -> str:
    """A ``YYYY-MM-DD`` date in ``year`` (days 1-28, so every month is valid)."""
    return f"{year:04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


class _KGBuilder:
    """Builds the triples and entity types of one synthetic world (one rng, fixed order)."""

    def __init__(self, config: SyntheticConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.names = _Names()
        self.mids = _Mids(rng.randrange(len(MID_ALPHABET) ** MID_DIGITS))
        self.triples: list[Triple] = []
        self.types: dict[str, str] = {}
        self.by_type: dict[str, list[str]] = {}
        self.birth_year: dict[str, int] = {}
        self.country_of: dict[str, str] = {}
        self.type_nodes = {
            kind: self._entity(self.names.unique(name), "type") for kind, name in NOTABLE_TYPE_NAMES
        }

    def build(self) -> tuple[tuple[Triple, ...], dict[str, str]]:
        """Create every entity and fact; return the triples and the entity types."""
        vocabularies = (
            ("genre", GENRES), ("profession", FILM_PROFESSIONS + OTHER_PROFESSIONS),
            ("job_title", JOB_TITLES), ("degree", DEGREES), ("gender", GENDERS),
        )
        for kind, words in vocabularies:
            for word in words:
                # Registered before any generated name, so each keeps its word as its name.
                self._typed(word, kind)
        self._geography()
        self._people()
        self._organisations()
        roles = self._films()
        self._professions(roles)
        self._marriages()
        self._employment()
        self._education()
        return tuple(self.triples), dict(self.types)

    # Entities and facts.
    def _entity(self, name: str, kind: str) -> str:
        self.types[name] = kind
        self.by_type.setdefault(kind, []).append(name)
        return name

    def _typed(self, base: str, kind: str, hint: str | None = None) -> str:
        name = self._entity(self.names.unique(base, hint), kind)
        self.add(name, NOTABLE_TYPES, self.type_nodes[kind])
        return name

    def _cvt(self) -> str:
        return self._entity(self.mids.allocate(), "cvt")

    def _literal(self, value: str) -> str:
        self.types.setdefault(value, "literal")
        return value

    def add(self, head: str, relation: str, tail: str) -> None:
        """Append one triple."""
        self.triples.append((head, relation, tail))

    def _pick(self, kind: str) -> str:
        return self.rng.choice(self.by_type[kind])

    # World parts.
    def _geography(self) -> None:
        cfg, rng = self.config, self.rng
        continents = [self._typed(name, "continent") for name in CONTINENTS[: cfg.continents]]
        countries = []
        for _ in range(cfg.countries):
            base = rng.choice(COUNTRY_PREFIXES) + rng.choice(COUNTRY_SUFFIXES)
            country = self._typed(base, "country")
            self.add(country, CONTAINED_BY, rng.choice(continents))
            self.add(country, POPULATION, self._literal(str(rng.randint(500_000, 200_000_000))))
            countries.append(country)
        capitals: dict[str, str] = {}
        for i in range(cfg.cities):
            country = countries[i] if i < len(countries) else rng.choice(countries)
            city = self._typed(rng.choice(CITY_PREFIXES) + rng.choice(CITY_SUFFIXES), "city",
                               hint=country)
            self.add(city, CONTAINED_BY, country)
            self.country_of[city] = country
            self.add(city, POPULATION, self._literal(str(rng.randint(5_000, 5_000_000))))
            capitals.setdefault(country, city)
        for country in countries:
            self.add(country, CAPITAL, capitals[country])

    def _people(self) -> None:
        cfg, rng = self.config, self.rng
        countries = self.by_type["country"]
        for _ in range(cfg.people):
            gender = rng.choice(GENDERS)
            first = rng.choice(FEMALE_FIRST if gender == "Female" else MALE_FIRST)
            person = self._typed(f"{first} {rng.choice(LAST_NAMES)}", "person")
            year = rng.randint(1930, 2000)
            self.birth_year[person] = year
            city = self._pick("city")
            self.add(person, GENDER, gender)
            self.add(person, DATE_OF_BIRTH, self._literal(_date(rng, year)))
            self.add(person, PLACE_OF_BIRTH, city)
            home = self.country_of[city] if rng.random() < 0.8 else rng.choice(countries)
            self.add(person, NATIONALITY, home)

    def _organisations(self) -> None:
        cfg, rng = self.config, self.rng
        for _ in range(cfg.companies):
            stem = rng.choice(COMPANY_STEMS) + rng.choice(COMPANY_TAILS)
            company = self._typed(f"{stem} {rng.choice(COMPANY_KINDS)}", "company")
            for founder in rng.sample(self.by_type["person"], rng.randint(1, 2)):
                self.add(company, FOUNDERS, founder)
            self.add(company, PLACE_FOUNDED, self._pick("city"))
            self.add(company, DATE_FOUNDED, self._literal(_date(rng, rng.randint(1850, 2015))))
            self.add(company, EMPLOYEES, self._literal(str(rng.randint(10, 100_000))))
        for _ in range(cfg.universities):
            city = self._pick("city")
            pattern = rng.choice(UNIVERSITY_PATTERNS)
            base = pattern.format(city=city.split(" (")[0], last=rng.choice(LAST_NAMES))
            university = self._typed(base, "university")
            self.add(university, CONTAINED_BY, city)
            self.add(university, DATE_FOUNDED, self._literal(_date(rng, rng.randint(1700, 1960))))

    def _films(self) -> dict[str, set[str]]:
        """Create the films; return profession name → people who worked in that role."""
        cfg, rng = self.config, self.rng
        people = self.by_type["person"]
        directors = rng.sample(people, _pool_size(cfg.people, cfg.director_share))
        writers = rng.sample(people, _pool_size(cfg.people, cfg.writer_share))
        producers = rng.sample(people, _pool_size(cfg.people, cfg.producer_share))
        actors = rng.sample(people, _pool_size(cfg.people, cfg.actor_share))
        roles: dict[str, set[str]] = {p: set() for p in FILM_PROFESSIONS}
        for _ in range(cfg.films):
            year = rng.randint(1950, 2023)
            title = rng.choice((
                f"The {rng.choice(TITLE_ADJECTIVES)} {rng.choice(TITLE_NOUNS)}",
                f"{rng.choice(TITLE_NOUNS)} of {rng.choice(TITLE_OF_NOUNS)}",
            ))
            film = self._typed(title, "film", hint=f"{year} film")
            count = 2 if rng.random() < cfg.co_director_rate and len(directors) > 1 else 1
            crew = rng.sample(directors, count)
            writer = crew[0] if rng.random() < cfg.parallel_relation_rate else rng.choice(writers)
            producer = (
                crew[0] if rng.random() < cfg.parallel_relation_rate else rng.choice(producers)
            )
            for director in crew:
                self.add(film, DIRECTED_BY, director)
            self.add(film, WRITTEN_BY, writer)
            self.add(film, PRODUCED_BY, producer)
            roles["Film Director"].update(crew)
            roles["Screenwriter"].add(writer)
            roles["Film Producer"].add(producer)
            for actor in rng.sample(actors, cfg.cast_size):
                performance = self._cvt()
                self.add(film, STARRING, performance)
                self.add(performance, PERFORMANCE_ACTOR, actor)
                roles["Actor"].add(actor)
            self.add(film, RELEASE_DATE, self._literal(_date(rng, year)))
            self.add(film, RUNTIME, self._literal(str(rng.randint(75, 190))))
            self.add(film, BUDGET, self._literal(str(rng.randint(5, 2_000) * 100_000)))
            for genre in rng.sample(GENRES, rng.randint(1, 2)):
                self.add(film, GENRE, genre)
            self.add(film, FILM_COUNTRY, self._pick("country"))
        return roles

    def _professions(self, roles: dict[str, set[str]]) -> None:
        for person in self.by_type["person"]:
            held = [p for p in FILM_PROFESSIONS if person in roles[p]]
            for profession in held or [self.rng.choice(OTHER_PROFESSIONS)]:
                self.add(person, PROFESSION, profession)

    def _marriages(self) -> None:
        cfg, rng = self.config, self.rng
        people = list(self.by_type["person"])
        rng.shuffle(people)
        couples = round(len(people) * cfg.marriage_rate / 2)
        for i in range(couples):
            pair = people[2 * i: 2 * i + 2]
            marriage = self._cvt()
            for spouse in pair:
                self.add(spouse, SPOUSE_S, marriage)
            for spouse in pair:
                self.add(marriage, MARRIAGE_SPOUSE, spouse)
            adult = max(self.birth_year[p] for p in pair) + 18
            start = rng.randint(adult, max(adult, min(adult + 30, 2023)))
            self.add(marriage, MARRIAGE_FROM, self._literal(_date(rng, start)))
            if rng.random() < cfg.divorce_rate:
                end = rng.randint(start + 1, max(start + 1, 2024))
                self.add(marriage, MARRIAGE_TO, self._literal(_date(rng, end)))

    def _employment(self) -> None:
        cfg, rng = self.config, self.rng
        for person in self.by_type["person"]:
            if rng.random() >= cfg.employment_rate:
                continue
            for _ in range(rng.randint(1, 2)):
                start = min(self.birth_year[person] + rng.randint(20, 40), 2023)
                tenure = self._cvt()
                self.add(person, EMPLOYMENT_HISTORY, tenure)
                self.add(tenure, TENURE_COMPANY, self._pick("company"))
                self.add(tenure, TENURE_TITLE, rng.choice(JOB_TITLES))
                self.add(tenure, TENURE_FROM, self._literal(_date(rng, start)))
                if rng.random() < 0.7:
                    end = min(start + rng.randint(1, 15), 2024)
                    self.add(tenure, TENURE_TO, self._literal(_date(rng, end)))

    def _education(self) -> None:
        cfg, rng = self.config, self.rng
        for person in self.by_type["person"]:
            if rng.random() >= cfg.education_rate:
                continue
            record = self._cvt()
            end = self.birth_year[person] + rng.randint(21, 30)
            self.add(person, EDUCATION, record)
            self.add(record, EDUCATION_INSTITUTION, self._pick("university"))
            self.add(record, EDUCATION_DEGREE, rng.choice(DEGREES))
            self.add(record, EDUCATION_END, self._literal(_date(rng, end)))


class _Index:
    """Neighbour lookup by (entity, relation) in both directions."""

    def __init__(self, triples: Sequence[Triple]) -> None:
        self._edges: dict[tuple[str, str], list[str]] = {}
        for h, r, t in triples:
            self._edges.setdefault((h, r), []).append(t)
            self._edges.setdefault((t, r + INVERSE_SUFFIX), []).append(h)

    def step(self, entity: str, relation: str) -> list[str]:
        """Entities one ``relation`` step (``rel^-1``: tail → head) away from ``entity``."""
        return self._edges.get((entity, relation), [])

    def follow(self, start: str, path: Sequence[str], avoid: frozenset[str]) -> set[str]:
        """Ends of the walks along ``path`` from ``start`` that never enter ``avoid``."""
        frontier = {start}
        for relation in path:
            frontier = {n for e in frontier for n in self.step(e, relation)} - avoid
        return frontier


@dataclass(frozen=True)
class _Draft:
    """A template instance before it gets an id."""

    template: QuestionTemplate
    topics: tuple[str, ...]
    answers: tuple[str, ...]


class _QuestionSampler:
    """Instantiates :data:`TEMPLATES` on a KG in the proportions of the config's mix."""

    def __init__(self, config: SyntheticConfig, index: _Index, types: dict[str, str],
                 rng: random.Random) -> None:
        self.config = config
        self.index = index
        self.types = types
        self.rng = rng
        self.by_type: dict[str, list[str]] = {}
        for name, kind in types.items():
            self.by_type.setdefault(kind, []).append(name)

    def sample(self) -> tuple[Question, ...]:
        """Return the questions, shuffled, with ids ``syn-000000``, ``syn-000001``, ..."""
        drafts: list[_Draft] = []
        for kind, count in self._counts().items():
            drafts.extend(self._sample_kind(kind, count))
        self.rng.shuffle(drafts)
        return tuple(
            Question(
                id=f"syn-{i:06d}",
                question=d.template.text.format(*d.topics),
                answers=d.answers,
                q_entities=d.topics,
                hops=d.template.hops,
                relation_paths=d.template.paths,
            )
            for i, d in enumerate(drafts)
        )

    def _counts(self) -> dict[QuestionKind, int]:
        """Questions per kind by largest remainder (ties go to the earlier kind)."""
        kinds: tuple[QuestionKind, ...] = ("one_hop", "two_hop", "three_hop", "multi_entity")
        exact = [self.config.questions * self.config.mix.share(k) for k in kinds]
        counts = [int(x) for x in exact]
        by_remainder = sorted(range(len(kinds)), key=lambda i: (counts[i] - exact[i], i))
        for i in by_remainder[: self.config.questions - sum(counts)]:
            counts[i] += 1
        return dict(zip(kinds, counts))

    def _sample_kind(self, kind: QuestionKind, count: int) -> list[_Draft]:
        """Distinct (template, topics) instances of ``kind``; bounded attempts."""
        if count == 0:
            return []
        templates = [t for t in TEMPLATES if t.kind == kind]
        found: dict[tuple[str, tuple[str, ...]], _Draft] = {}
        for _ in range(count * self.config.max_attempts):
            if len(found) == count:
                break
            draft = self._instantiate(self.rng.choice(templates))
            if draft is not None:
                found.setdefault((draft.template.name, draft.topics), draft)
        if len(found) < count:
            raise ValueError(
                f"found only {len(found)} distinct {kind} questions of {count} requested in "
                f"{count * self.config.max_attempts} attempts; lower `questions` or "
                f"`mix.{kind}`, raise `max_answers`, or enlarge the KG"
            )
        return list(found.values())

    def _instantiate(self, template: QuestionTemplate) -> _Draft | None:
        """Pick topic entities for ``template``; None when the instance is to be skipped."""
        first = self._starts(template.topic_types[0], template.paths[0][0])
        if not first:
            return None
        topics = [self.rng.choice(first)]
        for kind, path in zip(template.topic_types[1:], template.paths[1:]):
            # Choose a further topic entity that reaches one answer of the first path.
            reached = sorted(self.index.follow(topics[0], template.paths[0], frozenset(topics)))
            if not reached:
                return None
            anchor = self.rng.choice(reached)
            back = sorted(
                e for e in self.index.follow(anchor, invert_path(path), frozenset())
                if self.types.get(e) == kind and e not in topics
            )
            if not back:
                return None
            topics.append(self.rng.choice(back))
        avoid = frozenset(topics)
        ends = [self.index.follow(t, p, avoid) for t, p in zip(topics, template.paths)]
        answers = set.intersection(*ends)
        if not answers or len(answers) > self.config.max_answers:
            return None
        return _Draft(template, tuple(topics), tuple(sorted(answers)))

    def _starts(self, kind: str, relation: str) -> list[str]:
        return [e for e in self.by_type.get(kind, ()) if self.index.step(e, relation)]


def write_kg_folder(
    folder: str | Path, triples: Sequence[Triple], questions: Sequence[Question]
) -> None:
    """Write ``kg.txt`` and ``questions.jsonl`` into ``folder``.

    ``kg.txt`` holds one ``head<TAB>relation<TAB>tail`` line per triple (tabs, because Freebase
    names may contain ``|``); ``questions.jsonl`` one JSON object per question with the keys
    ``id, question, answer, q_entity, hops, relation_paths``.

    Args:
        folder: Destination; created if needed. Existing files are replaced.
        triples: The KG.
        questions: The questions.

    Raises:
        ValueError: if an entity or relation contains a tab or a line break.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for triple in triples:
        if any(c in part for part in triple for c in "\t\n\r"):
            raise ValueError(f"triple {triple!r} holds a tab or line break; kg.txt cannot store it")
        lines.append("\t".join(triple) + "\n")
    (folder / KG_FILE).write_text("".join(lines), encoding="utf-8", newline="\n")
    records = "".join(json.dumps(q.to_record(), ensure_ascii=False) + "\n" for q in questions)
    (folder / QUESTIONS_FILE).write_text(records, encoding="utf-8", newline="\n")


def read_kg_folder(folder: str | Path) -> tuple[tuple[Triple, ...], tuple[Question, ...]]:
    """Read a folder written by :func:`write_kg_folder` back exactly.

    Args:
        folder: Folder holding ``kg.txt`` and ``questions.jsonl``.

    Returns:
        The triples and the questions, in file order.

    Raises:
        FileNotFoundError: if a file is missing.
        ValueError: if a line is malformed (the message gives file and line number).
    """
    folder = Path(folder)
    triples = []
    for where, line in _lines(folder / KG_FILE):
        parts = line.split("\t")
        if len(parts) != 3:
            raise ValueError(f"{where}: expected head<TAB>relation<TAB>tail, got {line!r}")
        triples.append((parts[0], parts[1], parts[2]))
    questions = []
    for where, line in _lines(folder / QUESTIONS_FILE):
        try:
            questions.append(Question.from_record(json.loads(line)))
        except (TypeError, ValueError) as err:  # includes json.JSONDecodeError
            raise ValueError(f"{where}: not a question record ({err!r})") from None
    return tuple(triples), tuple(questions)


def _lines(path: Path) -> list[tuple[str, str]]:
    """Non-empty lines of ``path`` split on ``\\n`` only, each with ``file:line`` for errors."""
    text = path.read_text(encoding="utf-8")
    return [(f"{path}:{n}", line) for n, line in enumerate(text.split("\n"), start=1) if line]
