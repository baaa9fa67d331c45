"""The planner's prompt template and path grammar, defined once.

A planner reads ``<prompt text> <PATH>`` and writes ``r1 <SEP> r2 </PATH>`` (RoG, Luo et al.,
2024, "Reasoning on Graphs", writes ``<PATH>r1<SEP>r2</PATH>``), where each relation label is a
single token ``<r:label>`` and a relation followed from tail to head is its own token
``<r:label^-1>``. The template object renders the text of training examples and of inference
prompts alike; its ``full_id`` is saved with every checkpoint.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

PATH_START = "<PATH>"
PATH_SEP = "<SEP>"
PATH_END = "</PATH>"
PATH_MARKERS = (PATH_START, PATH_SEP, PATH_END)
TOPIC_MASK = "<e>"
"""What a topic entity's mention becomes in a prompt with ``PlannerConfig.mask_topics``."""
NAME_MASK = "<n>"
"""What any other name a question writes becomes in a prompt with ``PlannerConfig.mask_names``."""
TOPIC_TAG = re.compile(r"TE_\d+(?: \([^()]*\))?")
"""A privacy session's topic tag in the Brain's question (``TE_1 (film)``)."""
NAME_TAG = re.compile(r"\b(?:ent|lit)_[0-9a-f]{4,64}\b(?: \([^()]*\))?")
"""A session pseudonym with its type in the Brain's question (``ent_3f9a2c1d (person)``)."""
MISSING_TOPICS = re.compile(r"\s*\[topic entities:[^\]]*\]\s*$")
"""The list a session appends of the topics the question does not name."""
RELATION_TOKEN = "<r:{}>"
"""Format of a relation token; the label keeps its ``^-1`` for a backward step."""


def mask_topics(question: str, topics: Iterable[str]) -> str:
    """``question`` with every mention of a topic entity replaced by :data:`TOPIC_MASK`.

    Longer names first (so "The Wave" inside "The Wave 2" is not replaced alone), matched
    without regard to case.

    >>> mask_topics("who directed The Tempest", ["The Tempest"])
    'who directed <e>'
    """
    text = question
    for name in sorted({t for t in topics if t}, key=len, reverse=True):
        text = re.sub(re.escape(name), TOPIC_MASK, text, flags=re.IGNORECASE)
    return text


def brain_wording(masked: str, mask_topics: bool, mask_names: bool) -> str:
    """A question as a privacy session masked it for the Brain, as a planner's prompt takes it.

    The appended list of topics the question does not name is dropped; topic tags become
    :data:`TOPIC_MASK` when ``mask_topics``, and pseudonyms :data:`NAME_MASK` when ``mask_names``
    (a pseudonym is drawn afresh in every session, so only its place can be learnt).

    >>> brain_wording("which films was TE_1 (person) the ent_3f9a2c1d (has_tags.tail) for", True, True)
    'which films was <e> the <n> for'
    """
    text = MISSING_TOPICS.sub("", masked)
    if mask_topics:
        text = TOPIC_TAG.sub(TOPIC_MASK, text)
    return NAME_TAG.sub(NAME_MASK, text) if mask_names else text


def relation_token(label: str) -> str:
    """The token string of a relation-path label (``film.film.directed_by^-1`` → ``<r:...^-1>``)."""
    return RELATION_TOKEN.format(label)


@dataclass(frozen=True)
class PlanPrompt:
    """A versioned planner prompt: plain text with a ``{question}`` field (no chat template).

    Attributes:
        id: Stable lower-case name.
        version: Bumped whenever the wording changes.
        text: The prompt; ``{question}`` is replaced by the question.
    """

    id: str
    version: int
    text: str

    def __post_init__(self) -> None:
        if "{question}" not in self.text:
            raise ValueError(f"planner prompt {self.id!r} must contain the field {{question}}")

    @property
    def full_id(self) -> str:
        """``"<id>@v<version>"``, stored with checkpoints."""
        return f"{self.id}@v{self.version}"

    @property
    def digest(self) -> str:
        """First 12 hex digits of SHA-256 over the template (changes with any edit)."""
        return hashlib.sha256(f"{self.id}\x1f{self.version}\x1f{self.text}".encode()).hexdigest()[:12]

    def render(self, question: str) -> str:
        """The prompt text for ``question`` (the ``<PATH>`` token is appended by the tokeniser)."""
        return self.text.replace("{question}", question.strip())


PLAN_RELATION_PATHS = PlanPrompt(
    id="plan_relation_paths",
    version=1,
    text="Write the relation path over the knowledge graph that answers the question: {question}",
)

PLANNER_PROMPTS: Mapping[str, PlanPrompt] = MappingProxyType({PLAN_RELATION_PATHS.full_id: PLAN_RELATION_PATHS})
"""Planner prompt templates by ``full_id``; read-only."""


def planner_prompt(full_id: str) -> PlanPrompt:
    """The template registered as ``full_id``.

    Raises:
        ValueError: naming the known ids (so a config error points at ``prompt_id``).
    """
    if full_id not in PLANNER_PROMPTS:
        raise ValueError(f"unknown planner prompt {full_id!r}; set prompt_id to one of {sorted(PLANNER_PROMPTS)}")
    return PLANNER_PROMPTS[full_id]
