"""Configuration of the synthetic generator: sizes, rates and the question mix."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from rg.config import Config
from rg.data.synthetic.vocab import CONTINENTS

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
        if people is not None and share is not None and cast_size > pool_size(people, share):
            raise ValueError(
                f"cast_size ({cast_size}) exceeds the actor pool ({pool_size(people, share)} = "
                "people × actor_share); lower cast_size or raise actor_share"
            )
        return cast_size


def pool_size(people: int, share: float) -> int:
    """Size of a role pool: ``people × share`` rounded, at least 1 and at most ``people``."""
    return max(1, min(people, round(people * share)))
