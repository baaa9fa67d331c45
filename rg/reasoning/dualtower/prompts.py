"""The Brain's prompt templates and the pydantic schemas of its JSON replies, defined once.

Four templates (PrivGemo §4.2/§4.3, Appendix prompts): ``dualtower_analyse`` (anonymised question,
topic tags and relation-path hints → split questions, a skyline indicator, predicted depth),
``dualtower_select`` (anonymised question, indicator and numbered anonymised candidates → the best
``keep`` ids), ``dualtower_follow_up`` (refine mode: the Hand's follow-up question, the rejected
candidates and what they lacked, the relation paths asked for → what is missing and a refined
indicator) and ``dualtower_predict`` (predict mode: the paths explored so far → up to ``keep``
auxiliary targets among the nodes shown, and an indicator from them). All take the sealed
payload's JSON verbatim as their task field, so the text a Brain reads is exactly what the egress
guard checked. Replies are JSON objects validated by :class:`AnalysisReply` / :class:`SelectionReply` /
:class:`FollowUpReply` / :class:`PredictionReply`; :func:`parse_json_reply` takes the first JSON
object of a reply (models like to wrap it in a code fence) or raises ``ValueError``.
"""

from __future__ import annotations

import functools
import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rg.llm.prompts import PromptRegistry, PromptTemplate
from rg.privacy.normalise import normalise
from rg.reasoning.dualtower.payload import PAYLOAD_MODELS
from rg.reasoning.dualtower.phases import HAND_TEXTS

ANALYSE = PromptTemplate(
    id="dualtower_analyse",
    version=1,
    system="You plan how to answer questions over an anonymised knowledge graph. Entities appear only as "
    "pseudonyms with coarse types; you never need their names.",
    instructions="""
        You get a JSON object: an anonymised question, its topic entities (tag and pseudonym), relation
        paths that start at a topic entity, and the largest depth allowed. Split the question into
        simple sub-questions. Then write one skyline indicator per reasoning chain: the topic entities
        and the answer placed on one chain, e.g. `TE_1 -[relation]-> ?x -[relation]-> ANSWER`, using
        relation labels from the hints where they fit. Give each indicator its depth (hops from the
        farthest topic entity to the answer) and, if you can tell, the answer's coarse type.
        Reply with one JSON object and nothing else:
        {"sub_questions": [...], "indicators": [{"text": ..., "relations": [...], "depth": n,
        "answer_type": ... or null}], "depth": n}
    """,
    example="""
        Input: {"question": "who wrote the films directed by TE_1 (person)", "topics": [{"tag": "TE_1",
        "node": "ent_5b1c (person)"}], "relation_paths": [["rel_a^-1", "rel_b"]], "max_depth": 3}
        Reply: {"sub_questions": ["which films did TE_1 direct", "who wrote those films"], "indicators":
        [{"text": "TE_1 -[rel_a^-1]-> ?film -[rel_b]-> ANSWER", "relations": ["rel_a^-1", "rel_b"],
        "depth": 2, "answer_type": "person"}], "depth": 2}
    """,
    task_format="Input: {payload}\nReply:",
)

SELECT = PromptTemplate(
    id="dualtower_select",
    version=1,
    system="You choose knowledge-graph paths over an anonymised graph. Entities appear only as pseudonyms.",
    instructions="""
        You get a JSON object: an anonymised question, a skyline indicator of how the answer is reached,
        numbered candidate paths (`a → [r] → b`, `←` for a relation followed backwards; paths from
        several topic entities joined by ` & ` meet at the answer), and how many to keep. Choose the
        candidates most likely to lead to the answer along the indicator, best first.
        Reply with one JSON object and nothing else: {"ids": [best id, next id, ...]}
    """,
    example="""
        Input: {"question": "who directed TE_1 (film)", "indicator": "TE_1 -[rel_d]-> ANSWER",
        "candidates": [{"id": 1, "text": "TE_1 → [rel_w] → ent_a1 (person)", "branches": [["rel_w"]]},
        {"id": 2, "text": "TE_1 → [rel_d] → ent_b2 (person)", "branches": [["rel_d"]]}], "keep": 1}
        Reply: {"ids": [2]}
    """,
    task_format="Input: {payload}\nReply:",
)

FOLLOW_UP = PromptTemplate(
    id="dualtower_follow_up",
    version=1,
    system="You plan how to answer questions over an anonymised knowledge graph. Entities appear only as "
    "pseudonyms with coarse types; you never need their names.",
    instructions="""
        You get a JSON object: an anonymised question, a follow-up question about evidence that is still
        missing, a draft indicator, the topic entities, the candidate paths tried so far with what each one
        lacked, the relation paths not tried yet, and the largest depth allowed. Say in a few words what
        evidence is missing (a relation, a bridge node or a type), then write one refined skyline indicator
        that reaches the answer along other relations, using relation labels from the paths not tried yet.
        Use only the anonymised symbols you were given. Reply with one JSON object and nothing else:
        {"missing": "...", "indicator": {"text": ..., "relations": [...], "depth": n, "answer_type": ... or null}}
    """,
    example="""
        Input: {"question": "when was TE_1 (film) released", "follow_up": "which other relation leads from TE_1
        to the answer?", "tried": [{"id": 1, "text": "TE_1 → [rel_a] → ent_7c2e (person)", "branches": [["rel_a"]],
        "nodes": [["ent_7c2e (person)"]], "missing": "ends at a person; the indicator asks for a year"}],
        "relation_paths": [["rel_b"], ["rel_c"]], "max_depth": 3}
        Reply: {"missing": "a relation from the film to a year", "indicator": {"text": "TE_1 -[rel_c]-> ANSWER",
        "relations": ["rel_c"], "depth": 1, "answer_type": "year"}}
    """,
    task_format="Input: {payload}\nReply:",
)

PREDICT = PromptTemplate(
    id="dualtower_predict",
    version=1,
    system="You reason over an anonymised knowledge graph. Entities appear only as pseudonyms with coarse types; "
    "you never need their names.",
    instructions="""
        You get a JSON object: an anonymised question, its indicator, the topic entities, the paths explored so
        far (with the nodes on each branch and what each lacked), relation paths from the topic entities, and
        how many targets to name. Propose up to that many plausible targets: answers or bridge nodes from
        which the answer is one or a few hops away. A target is a node exactly as shown on the paths, or a
        type placeholder such as "(person)" for every shown node of that type. Give each a short path pattern
        and a reason, and one indicator from the targets to the answer. Use only the anonymised symbols you
        were given. Reply with one JSON object and nothing else:
        {"predictions": [{"target": ..., "path_pattern": [...], "reason": ...}], "indicator": {"text": ...,
        "relations": [...], "depth": n, "answer_type": ... or null}}
    """,
    example="""
        Input: {"question": "which films share a director with TE_1 (film)", "paths": [{"id": 1, "text": "TE_1 →
        [rel_a] → ent_7c2e (person)", "branches": [["rel_a"]], "nodes": [["ent_7c2e (person)"]], "missing": "ends at
        a person; the indicator asks for a film"}], "keep": 3}
        Reply: {"predictions": [{"target": "ent_7c2e (person)", "path_pattern": ["rel_a", "rel_a^-1"], "reason":
        "the director; the answer is another film of theirs"}], "indicator": {"text": "ent_7c2e -[rel_a^-1]->
        ANSWER", "relations": ["rel_a^-1"], "depth": 1, "answer_type": "film"}}
    """,
    task_format="Input: {payload}\nReply:",
)

# The examples name relations neutrally (rel_a, rel_d): in privacy mode every raw relation label of the
# working subgraph is guarded, and an example naming a real one would make the guard refuse the request.
BRAIN_TEMPLATES = (ANALYSE, SELECT, FOLLOW_UP, PREDICT)
BRAIN_PROMPTS = PromptRegistry(BRAIN_TEMPLATES)
"""The Brain's templates by id."""


@functools.cache
def protocol_words() -> frozenset[str]:
    """The normalised words every request to the Brain writes whatever the KG holds: the payloads' keys and
    kinds (:mod:`rg.reasoning.dualtower.payload`), the Hand's fixed texts in them
    (:data:`rg.reasoning.dualtower.phases.HAND_TEXTS`), and the chat messages of :data:`BRAIN_TEMPLATES`
    with empty task fields, keys and roles included.

    A privacy session takes them as public (``PrivacySession(protocol=...)``): an entity whose name is one
    of them reveals nothing by appearing there, since every request writes it. Without this, MetaQA's tag
    ``tag`` in a subgraph made the guard refuse every analysis payload (its topics' key ``"tag"``), and
    the tag ``film`` every request of an LLM Brain (the analysis example's ``?film``)."""
    texts: list[str] = []
    for model in PAYLOAD_MODELS:
        texts += list(model.model_fields)
        kind = model.model_fields.get("kind")
        if kind is not None:
            texts.append(str(kind.default))
    for template in BRAIN_TEMPLATES:
        for message in template.render(**{field: "" for field in template.fields}):
            texts += [f"{key} {value}" for key, value in message.items()]
    texts += [re.sub(r"\{\w+\}", " ", text) for text in HAND_TEXTS]
    words: set[str] = set()
    for text in texts:
        folded = normalise(text)
        words.update(w for w in re.split(r"[^0-9a-z]+", folded) if w)
        words.update(w for w in folded.split() if w)  # a key as written: relation_paths
    return frozenset(words)


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class IndicatorReply(_Reply):
    text: str = Field(min_length=1)
    relations: list[str] = Field(default_factory=list)
    depth: int = Field(ge=1, le=10)
    answer_type: str | None = None


class AnalysisReply(_Reply):
    """What ``dualtower_analyse`` must return."""

    sub_questions: list[str] = Field(default_factory=list)
    indicators: list[IndicatorReply] = Field(min_length=1)
    depth: int = Field(ge=1, le=10)


class SelectionReply(_Reply):
    """What ``dualtower_select`` must return."""

    ids: list[int] = Field(min_length=1)


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_json_reply(text: str, model: type[BaseModel]) -> BaseModel:
    """The reply's JSON object validated as ``model``.

    Raises:
        ValueError: when the reply holds no JSON object or it does not validate (the message says why).
    """
    match = _OBJECT.search(text)
    if match is None:
        raise ValueError("the reply holds no JSON object")
    try:
        return model.model_validate(json.loads(match.group(0)))
    except json.JSONDecodeError as err:
        raise ValueError(f"the reply's JSON does not parse: {err}") from None
    except ValidationError as err:
        raise ValueError(f"the reply's JSON has the wrong shape: {err.error_count()} errors") from None


class FollowUpReply(_Reply):
    """What ``dualtower_follow_up`` must return."""

    missing: str = ""
    indicator: IndicatorReply


class PredictionItem(_Reply):
    target: str = Field(min_length=1)
    path_pattern: list[str] = Field(default_factory=list)
    reason: str = ""


class PredictionReply(_Reply):
    """What ``dualtower_predict`` must return."""

    predictions: list[PredictionItem] = Field(min_length=1)
    indicator: IndicatorReply | None = None
