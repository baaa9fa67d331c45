"""Build the triples of one synthetic Freebase-like world, with CVT nodes, literals and types."""

from __future__ import annotations

import random

from rg.data.sample import Triple
from rg.data.synthetic.config import SyntheticConfig, pool_size
from rg.data.synthetic.vocab import (
    BUDGET,
    CAPITAL,
    CITY_PREFIXES,
    CITY_SUFFIXES,
    COMPANY_KINDS,
    COMPANY_STEMS,
    COMPANY_TAILS,
    CONTAINED_BY,
    CONTINENTS,
    COUNTRY_PREFIXES,
    COUNTRY_SUFFIXES,
    DATE_FOUNDED,
    DATE_OF_BIRTH,
    DEGREES,
    DIRECTED_BY,
    EDUCATION,
    EDUCATION_DEGREE,
    EDUCATION_END,
    EDUCATION_INSTITUTION,
    EMPLOYEES,
    EMPLOYMENT_HISTORY,
    FEMALE_FIRST,
    FILM_COUNTRY,
    FILM_PROFESSIONS,
    FOUNDERS,
    GENDER,
    GENDERS,
    GENRE,
    GENRES,
    JOB_TITLES,
    LAST_NAMES,
    MALE_FIRST,
    MARRIAGE_FROM,
    MARRIAGE_SPOUSE,
    MARRIAGE_TO,
    NATIONALITY,
    NOTABLE_TYPES,
    NOTABLE_TYPE_NAMES,
    OTHER_PROFESSIONS,
    PERFORMANCE_ACTOR,
    PLACE_FOUNDED,
    PLACE_OF_BIRTH,
    POPULATION,
    PRODUCED_BY,
    PROFESSION,
    RELEASE_DATE,
    RUNTIME,
    SPOUSE_S,
    STARRING,
    TENURE_COMPANY,
    TENURE_FROM,
    TENURE_TITLE,
    TENURE_TO,
    TITLE_ADJECTIVES,
    TITLE_NOUNS,
    TITLE_OF_NOUNS,
    UNIVERSITY_PATTERNS,
    WRITTEN_BY,
)

# Freebase mids: "m.0" followed by base-32 digits from this alphabet.
MID_ALPHABET = "0123456789bcdfghjklmnpqrstvwxyz_"
MID_DIGITS = 5
MID_MULTIPLIER = 0x9E3779B1  # odd, hence a bijection modulo 32**MID_DIGITS


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


class KGBuilder:
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
        directors = rng.sample(people, pool_size(cfg.people, cfg.director_share))
        writers = rng.sample(people, pool_size(cfg.people, cfg.writer_share))
        producers = rng.sample(people, pool_size(cfg.people, cfg.producer_share))
        actors = rng.sample(people, pool_size(cfg.people, cfg.actor_share))
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
