"""Prompt templates and reply schemas of the LLM-guided traversal (all of them, in one module).

Three Hand-side calls (ReMindRAG §3.1 and Appendix B.3-B.5): ``traverse_explore`` shows the
subgraph S and asks whether it suffices, and if not which node of S is most answer-relevant
(node exploration); ``traverse_exploit`` shows that node's neighbour edges and asks for the best
one (node exploitation); ``traverse_answer`` shows S and asks for the answers and the triples that
gave them (what memorisation enhances). Replies are one JSON object validated by pydantic
(:func:`rg.reasoning.dualtower.prompts.parse_json_reply`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rg.llm.prompts import PromptRegistry, PromptTemplate

EXPLORE = PromptTemplate(
    id="traverse_explore",
    version=1,
    system="You explore a knowledge graph to answer a question. You see the part explored so far.",
    instructions="""
        You get a question, the numbered nodes of the explored subgraph and its triples. If the triples
        already contain the answer, say so. Otherwise choose the node from which the graph should be
        explored further: the one most likely to lead to the answer.
        Reply with one JSON object and nothing else:
        {"sufficient": true or false, "node": <node number, or null when sufficient>}
    """,
    example="""
        Question: who directed Heat
        Nodes:
        [0] Heat
        Triples:
        (none yet)
        Reply: {"sufficient": false, "node": 0}
    """,
    task_format="Question: {question}\nNodes:\n{nodes}\nTriples:\n{triples}\nReply:",
)

EXPLOIT = PromptTemplate(
    id="traverse_exploit",
    version=1,
    system="You explore a knowledge graph to answer a question, one edge at a time.",
    instructions="""
        You get a question, the node being expanded and its numbered edges to nodes not explored yet.
        Choose the edge most likely to lead to the answer.
        Reply with one JSON object and nothing else: {"edge": <edge number>}
    """,
    example="""
        Question: who directed Heat
        Node: Heat
        Edges:
        [0] Heat -> release_year -> 1995
        [1] Heat -> directed_by -> Michael Mann
        Reply: {"edge": 1}
    """,
    task_format="Question: {question}\nNode: {node}\nEdges:\n{edges}\nReply:",
)

ANSWER = PromptTemplate(
    id="traverse_answer",
    version=1,
    system="You answer questions from knowledge-graph triples only.",
    instructions="""
        You get a question and numbered triples. Answer with entity names exactly as written in the
        triples, and list the numbers of the triples the answer rests on.
        Reply with one JSON object and nothing else: {"answers": ["<name>", ...], "used": [<triple number>, ...]}
    """,
    example="""
        Question: who directed Heat
        Triples:
        [0] Heat -> release_year -> 1995
        [1] Heat -> directed_by -> Michael Mann
        Reply: {"answers": ["Michael Mann"], "used": [1]}
    """,
    task_format="Question: {question}\nTriples:\n{triples}\nReply:",
)

PROMPTS = PromptRegistry((EXPLORE, EXPLOIT, ANSWER))

REASK = "Your reply could not be used: {problem}. Reply again with the JSON object only."
"""User message appended (after the bad reply) when a reply is re-asked."""


class ExploreReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sufficient: bool
    node: int | None = None


class ExploitReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    edge: int


class AnswerReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    answers: list[str] = Field(min_length=1)
    used: list[int] = Field(default_factory=list)
