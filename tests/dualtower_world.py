"""A tiny hand-made film graph and a tiny planner trained on it, for the dual-tower tests.

Not a test module: imported by tests/test_dualtower*.py and bench.dualtower's --quick run.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from rg.data.rog import write_rog_parquet
from rg.data.sample import Sample
from rg.privacy import KGSchema
from rg.retrievers.planner import PlannerConfig, PlannerModel
from rg.retrievers.planner.prompt import mask_topics
from rg.training.planner_loop import PlannerFitConfig, fit_planner

TRIPLES = (
    ("Heat", "directed_by", "Michael Mann"),
    ("Heat", "written_by", "Michael Mann"),
    ("Heat", "starred_actors", "Al Pacino"),
    ("Heat", "starred_actors", "Robert De Niro"),
    ("Heat", "release_year", "1995"),
    ("Collateral", "directed_by", "Michael Mann"),
    ("Collateral", "starred_actors", "Tom Cruise"),
    ("Collateral", "release_year", "2004"),
    ("The Irishman", "directed_by", "Martin Scorsese"),
    ("The Irishman", "starred_actors", "Al Pacino"),
    ("The Irishman", "starred_actors", "Robert De Niro"),
    ("The Irishman", "release_year", "2019"),
    ("Casino", "directed_by", "Martin Scorsese"),
    ("Casino", "starred_actors", "Robert De Niro"),
    ("Casino", "written_by", "Nicholas Pileggi"),
    ("Casino", "release_year", "1995"),
    ("Top Gun", "directed_by", "Tony Scott"),
    ("Top Gun", "starred_actors", "Tom Cruise"),
    ("Top Gun", "release_year", "1986"),
)
FILMS = ("Heat", "Collateral", "The Irishman", "Casino", "Top Gun")
PEOPLE = ("Michael Mann", "Al Pacino", "Robert De Niro", "Tom Cruise", "Martin Scorsese", "Nicholas Pileggi",
          "Tony Scott")
TYPES = {**{f: "film" for f in FILMS}, **{p: "person" for p in PEOPLE},
         **{y: "year" for y in ("1995", "2004", "2019", "1986")}}

FILM_TEMPLATES = (
    ("who directed {}", ("directed_by",)),
    ("who wrote {}", ("written_by",)),
    ("who starred in {}", ("starred_actors",)),
    ("when was {} released", ("release_year",)),
    ("which films share a director with {}", ("directed_by", "directed_by^-1")),
    ("who starred in the films directed by the director of {}", ("directed_by", "directed_by^-1", "starred_actors")),
)
PASSIVE_WRITER = ("who was {} written by", ("written_by",))
PERSON_TEMPLATES = (
    ("which films did {} direct", ("directed_by^-1",)),
    ("which films did {} act in", ("starred_actors^-1",)),
    ("who directed the films starring {}", ("starred_actors^-1", "directed_by")),
    ("which films starred {} and were directed by {}", ("starred_actors^-1",)),
)

QUESTIONS = (
    # (question, topics, answer): 1-hop, 2-hop, 3-hop and two-topic questions with one right answer
    ("who directed Casino", ("Casino",), "Martin Scorsese"),
    ("who wrote Casino", ("Casino",), "Nicholas Pileggi"),
    ("when was Top Gun released", ("Top Gun",), "1986"),
    ("which films share a director with Casino", ("Casino",), "The Irishman"),
    ("who directed the films starring Tom Cruise", ("Tom Cruise",), "Michael Mann"),
    ("which films starred Al Pacino and were directed by Michael Mann", ("Al Pacino", "Michael Mann"), "Heat"),
    ("which films starred Tom Cruise and were directed by Tony Scott", ("Tom Cruise", "Tony Scott"), "Top Gun"),
)
"""`who directed the films starring Tom Cruise`: Michael Mann and Tony Scott both are; see ANSWER_SETS."""
ANSWER_SETS = {"who directed the films starring Tom Cruise": {"Michael Mann", "Tony Scott"}}


def schema() -> KGSchema:
    return KGSchema.build(TRIPLES, TYPES)


def write_qa_input(folder: Path, questions=QUESTIONS) -> Path:
    """``questions`` as RoG samples ``q0, q1, ...`` over the whole film graph in ``folder/samples.parquet``, and the
    schema saved in ``folder``: a dual-tower QA evaluation's ``input`` and ``schema_dir``. Returns the parquet file."""
    samples = [Sample(f"q{i}", q, (a,), topics, (a,), TRIPLES) for i, (q, topics, a) in enumerate(questions)]
    write_rog_parquet(samples, folder / "samples.parquet")
    schema().save(folder)
    return folder / "samples.parquet"


def training_rows(film_templates=FILM_TEMPLATES) -> list[tuple[str, str, tuple[str, ...]]]:
    """(id, masked question, relation path) for every template and entity of its kind."""
    rows = []
    for template, path in film_templates:
        for film in FILMS:
            rows.append((f"{template}:{film}", mask_topics(template.format(film), [film]), path))
    for template, path in PERSON_TEMPLATES:
        for i, person in enumerate(PEOPLE):
            names = (person, PEOPLE[(i + 1) % len(PEOPLE)])[: template.count("{}")]
            rows.append((f"{template}:{person}", mask_topics(template.format(*names), names), path))
    return rows


@functools.cache
def shared_planner() -> PlannerModel:
    """:func:`trained_planner` with 60 epochs and raw relations, trained once per test session and shared
    read-only (tests use it in eval mode and save copies; about 50 s of training each time saved)."""
    return trained_planner(epochs=60)


@functools.cache
def shared_cluster_planner() -> PlannerModel:
    """:func:`trained_planner` with 60 epochs on the privacy view's clusters of :func:`schema`, trained once
    per test session and shared read-only."""
    kg_schema = schema()
    return trained_planner(lambda path: kg_schema.view_path(path), epochs=60)


@functools.cache
def passive_cluster_planner() -> PlannerModel:
    """:func:`shared_cluster_planner`, also trained on the wording "who was {} written by". The tests of the
    Hand's cluster resolution ask in that wording (its words meet ``written_by``'s), and a wording the tiny
    planner never saw decodes differently on other CPUs' float rounding: on one machine the Brain chose
    the one-step path, on another a two-step one."""
    kg_schema = schema()
    return trained_planner(lambda path: kg_schema.view_path(path), epochs=60,
                           film_templates=(*FILM_TEMPLATES, PASSIVE_WRITER))


def trained_planner(relation_view=lambda path: path, epochs: int = 40, film_templates=FILM_TEMPLATES) -> PlannerModel:
    """A tiny planner (masked topics) trained on :func:`training_rows`, relation paths mapped by
    ``relation_view`` (e.g. to the privacy mode's clusters)."""
    rows = [(qid, q, tuple(relation_view(p))) for qid, q, p in training_rows(film_templates)]
    relations = {label.removesuffix("^-1") for _, _, p in rows for label in p}
    config = PlannerConfig(tiny={"layers": 1, "hidden": 32, "heads": 2, "max_positions": 48},
                           lora={"dropout": 0.0}, max_prompt_tokens=32, mask_topics=True)
    torch.manual_seed(0)
    planner = PlannerModel.build(config, [q for _, q, _ in rows], relations)
    examples = planner.examples(rows)
    result = fit_planner(planner, examples, [], PlannerFitConfig(epochs=epochs, batch_size=16, lr=0.02))
    planner.load_trainable_state(result.best_state)
    return planner.eval()
