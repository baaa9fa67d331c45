"""Weak relation-path targets chosen by answer F1 (rg.supervision.answer_paths) on hand-made graphs."""

from __future__ import annotations

import pytest

from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.answer_paths import answer_f1_labels, answer_f1_paths, score_relation_paths
from rg.supervision.weak import WeakConfig
from rg.evaluation.references import reference_paths
from rg.jobs.weak_labels import planner_labels, weak_rows
from rg.supervision.labels import LabelConfig, weak_paths_of
from rg.training.planner_data import plan_targets

# X's director also directed F2 and F3; the question asks for the writers of the movies that
# share X's director (MetaQA 3-hop style). X's own writer W1 is one step from X.
TRIPLES = (
    ("X", "directed_by", "D"),
    ("F2", "directed_by", "D"),
    ("F3", "directed_by", "D"),
    ("X", "written_by", "W1"),
    ("F2", "written_by", "W2"),
    ("F3", "written_by", "W1"),
    ("X", "has_genre", "Drama"),
)
THREE_HOP = ("directed_by", "directed_by^-1", "written_by")
SAMPLE = Sample("q", "the movies that share directors with X are written by who", ("W1", "W2"), ("X",), ("W1", "W2"), TRIPLES)


def test_shortest_paths_label_the_shortcut_first():
    assert weak_paths_of(SAMPLE, WeakConfig())[0] == ("written_by",)


def test_answer_f1_prefers_the_path_that_reaches_every_answer():
    assert answer_f1_paths(SAMPLE, max_len=3) == (THREE_HOP,)
    scored = {p.relation_path: p for p in score_relation_paths(KnowledgeGraph.from_triples(TRIPLES), ["X"], ["W1", "W2"], 3)}
    assert scored[THREE_HOP].f1 == pytest.approx(1.0)
    shortcut = scored[("written_by",)]
    assert (shortcut.precision, shortcut.recall) == (1.0, 0.5) and shortcut.f1 == pytest.approx(2 / 3)
    # X's writer, then every film W1 wrote (X is a topic and left out: F3), then their writer W1
    assert scored[("written_by", "written_by^-1", "written_by")].recall == 0.5
    assert ("has_genre",) not in scored  # reaches no answer
    assert answer_f1_paths(SAMPLE, max_len=1) == (("written_by",),)


def test_tolerance_keeps_near_ties_and_answers_outside_the_graph_are_ignored():
    assert answer_f1_paths(SAMPLE, max_len=3, tolerance=0.34)[:2] == (THREE_HOP, ("written_by",))
    elsewhere = Sample("q2", "?", ("W2", "Nobody"), ("X",), ("W2", "Nobody"), TRIPLES)
    assert answer_f1_paths(elsewhere, max_len=3)[0] == ("directed_by", "directed_by^-1", "written_by")
    lost = Sample("q3", "?", ("Nobody",), ("X",), ("Nobody",), TRIPLES)
    assert answer_f1_paths(lost, max_len=3) == ()


def test_planner_targets_and_references_follow_the_weak_rule():
    rule = WeakConfig(rule="answer_f1")

    def targets(max_len: int, labels: LabelConfig = LabelConfig(weak=rule)):
        # the planner job's weak rows: the answer-F1 search goes as deep as the planner's longest path
        return plan_targets([SAMPLE], weak_rows([SAMPLE], planner_labels(labels, max_len)), max_len=max_len)

    found, stats = targets(3)
    assert found[0].relation_paths == (THREE_HOP,) and found[0].source == "weak"
    assert stats.to_dict()["questions_weak"] == 1
    assert reference_paths([SAMPLE], weak=rule, max_len=3) == {"q": (THREE_HOP,)}
    assert targets(1)[0][0].relation_paths == (("written_by",),)
    shortest, _ = targets(3, LabelConfig())
    assert shortest[0].relation_paths[0] == ("written_by",) and shortest[0].source == "weak"


def test_retriever_labels_by_answer_f1_hold_every_triple_of_the_chosen_walks():
    found = answer_f1_labels(SAMPLE, WeakConfig(rule="answer_f1"))
    # X→D, F2→D, F3→D (and D←X back to the topic), then the writers of X, F2 and F3
    assert found.relation_paths == (THREE_HOP,) and found.positive_triples == (0, 1, 2, 3, 4, 5)
    assert all(w.relation_path == THREE_HOP and w.start == "X" for w in found.walks)
    row = weak_rows([SAMPLE], LabelConfig(weak={"rule": "answer_f1"}))["q"]
    assert row.positive_triples == (0, 1, 2, 3, 4, 5) and row.selector == "answer_f1" and row.source == "weak"
    assert "X → [directed_by] → D" in row.paths[0]
    shortest = weak_rows([SAMPLE], LabelConfig())["q"]
    assert 3 in shortest.positive_triples and shortest.selector == "weak"


# The same question on a subgraph cut by a triple budget: F2's writer W2 fell off, so in the
# subgraph X's own writer is the only answer and the shortcut ties the 3-hop path.
CUT = Sample("q", SAMPLE.question, ("W1", "W2"), ("X",), ("W1", "W2"), TRIPLES[:4] + TRIPLES[5:])


def _write_kb(folder) -> dict:
    path = folder / "kb.tsv"
    path.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in TRIPLES) + "broken line\n")
    return {"path": str(path), "format": "tsv"}


def test_a_cut_subgraph_ties_the_shortcut_and_the_whole_kb_breaks_the_tie(tmp_path):
    assert answer_f1_paths(CUT, max_len=3)[0] == ("written_by",)
    kb = KnowledgeGraph.from_triples(TRIPLES)
    assert answer_f1_paths(CUT, max_len=3, kb=kb) == (THREE_HOP,)
    weak = WeakConfig(rule="answer_f1", kb=_write_kb(tmp_path))
    targets, _ = plan_targets([CUT], weak_rows([CUT], LabelConfig(weak=weak), kb=kb), max_len=3)
    assert targets[0].relation_paths == (THREE_HOP,)
    # labels are the triples of the chosen path's complete walks inside the subgraph (ids index
    # CUT.triples): X→D←F3→W1 and X→D←X→W1; F2→D leads nowhere once F2's writer is cut
    row = weak_rows([CUT], LabelConfig(weak=weak))["q"]  # the KB loaded from weak.kb
    assert row.relation_paths == (THREE_HOP,) and row.positive_triples == (0, 2, 3, 4)


def test_kb_settings_are_checked():
    with pytest.raises(ValueError, match="set rule: answer_f1 or remove kb"):
        WeakConfig(kb={"path": "kb.tsv", "format": "tsv"})
    with pytest.raises(FileNotFoundError, match="check the `kb.path` setting"):
        weak_rows([SAMPLE], LabelConfig(weak={"rule": "answer_f1", "kb": {"path": "/nonexistent/kb.tsv", "format": "tsv"}}))
