"""The template vote over tied planner targets (rg.training.planner_data.TemplateConsensus).

Three films; in two of them the director also wrote the film, so "who directed <e>" is answered
as well by ``written_by`` there (an answer-F1 tie), but not in the third."""

from __future__ import annotations

from rg.data.sample import Sample
from rg.jobs.weak_labels import planner_labels, weak_rows
from rg.supervision.labels import VOTED_SELECTOR, LabelConfig
from rg.supervision.weak import WeakConfig
from rg.training.planner_data import (
    TemplateConsensus,
    candidate_targets,
    question_template,
    select_targets,
)

TRIPLES = (
    ("Alpha", "directed_by", "Ann"),
    ("Alpha", "written_by", "Ann"),
    ("Beta", "directed_by", "Bo"),
    ("Beta", "written_by", "Bo"),
    ("Gamma", "directed_by", "Cy"),
    ("Gamma", "written_by", "Dee"),
    ("Gamma", "starred_actors", "Ann"),
)
ANSWER_F1 = WeakConfig(rule="answer_f1")


def directed(qid: str, film: str, director: str) -> Sample:
    return Sample(qid, f"who directed {film}", (director,), (film,), (director,), TRIPLES)


def candidates(samples):
    """The planner's candidate targets from the weak rows of the answer-F1 rule, one relation deep."""
    rows = weak_rows(samples, planner_labels(LabelConfig(weak=ANSWER_F1), 1))
    return candidate_targets(samples, rows, max_len=1)


def test_template_blanks_topic_mentions_longest_first_and_folds_case():
    assert question_template("who directed The Wave", ["The Wave"]) == "who directed <e>"
    assert question_template("Who  directed THE WAVE 2", ["The Wave", "The Wave 2"]) == "who directed <e>"
    assert question_template("films by Ann and Bo", ["Ann", "Bo"]) == "films by <e> and <e>"
    assert question_template("no mention here", ["Gamma"]) == "no mention here"


def test_the_vote_keeps_the_path_the_wording_chose_most_often():
    samples = [directed("q1", "Alpha", "Ann"), directed("q2", "Beta", "Bo"), directed("q3", "Gamma", "Cy")]
    targets, stats = candidates(samples)
    by_id = {t.id: t for t in targets}
    assert by_id["q1"].relation_paths == (("directed_by",), ("written_by",))  # the tie
    assert by_id["q3"].relation_paths == (("directed_by",),)
    assert {t.template for t in targets} == {"who directed <e>"}

    consensus = TemplateConsensus.fit(targets)
    assert consensus.counts["who directed <e>"] == {("directed_by",): 3, ("written_by",): 2}
    voted = select_targets(targets, stats, max_paths=4, consensus=consensus)
    assert [t.relation_paths for t in voted] == [(("directed_by",),)] * 3
    assert stats.outvoted == 2 and stats.capped == 0
    assert stats.to_dict()["paths_outvoted"] == 2


def test_unknown_or_unique_wording_and_count_ties_keep_every_path():
    train = [directed("q1", "Alpha", "Ann"), directed("q3", "Gamma", "Cy")]
    consensus = TemplateConsensus.fit(candidates(train)[0])
    # a validation question worded differently: no counts, nothing dropped
    other = Sample("v1", "Beta was directed by whom", ("Bo",), ("Beta",), ("Bo",), TRIPLES)
    targets, stats = candidates([other])
    assert select_targets(targets, stats, consensus=consensus)[0].relation_paths == (("directed_by",), ("written_by",))
    # alone in its template, both tied paths count once: a tie of counts keeps both
    alone = TemplateConsensus.fit(candidates([directed("q1", "Alpha", "Ann")])[0])
    targets, stats = candidates([directed("q1", "Alpha", "Ann")])
    assert len(select_targets(targets, stats, consensus=alone)[0].relation_paths) == 2
    assert stats.outvoted == 0


def test_the_cap_applies_after_the_vote():
    samples = [directed("q1", "Alpha", "Ann"), directed("q3", "Gamma", "Cy")]
    targets, stats = candidates(samples)
    capped = select_targets(targets, stats, max_paths=1)
    assert capped[0].relation_paths == (("directed_by",),) and stats.capped == 1 and stats.outvoted == 0


def test_masked_prompts_see_the_wording_not_the_entity():
    from rg.retrievers.planner import PlannerConfig, PlannerModel
    from rg.training.planner_data import target_rows

    tiny = {"layers": 1, "hidden": 16, "heads": 2, "max_positions": 40}
    masked = PlannerModel.build(
        PlannerConfig(tiny=tiny, max_prompt_tokens=16, mask_topics=True), ["who directed <e>"], {"directed_by"}
    )
    targets, _ = candidates([directed("q1", "Alpha", "Ann"), directed("q2", "Beta", "Bo")])
    rows = target_rows(targets, masked.prompt_question)
    assert {question for _, question, _ in rows} == {"who directed <e>"}
    assert masked.prompt_ids([masked.prompt_question(t.question, t.topics) for t in targets]) == [
        masked.prompt_ids(["who directed <e>"])[0]
    ] * 2
    plain = PlannerModel.build(PlannerConfig(tiny=tiny, max_prompt_tokens=16), ["who directed Alpha"], {"directed_by"})
    assert plain.prompt_question("who directed Alpha", ["Alpha"]) == "who directed Alpha"
    assert [q for _, q, _ in target_rows(targets)] == ["who directed Alpha"] * 2 + ["who directed Beta"] * 2


def test_retriever_labels_keep_the_voted_paths_walks_counted_on_training_questions_only():
    import pytest

    samples = [directed("q1", "Alpha", "Ann"), directed("q2", "Beta", "Bo"), directed("q3", "Gamma", "Cy")]
    config = LabelConfig(weak={"rule": "answer_f1", "max_path_len": 1}, template_vote=True)
    rows = weak_rows(samples, config, train_ids={"q1", "q2", "q3"})
    # Alpha's written_by triple (index 1) ties on answer F1 but is outvoted; its directed_by (0) stays
    assert rows["q1"].positive_triples == (0,) and rows["q1"].relation_paths == (("directed_by",),)
    assert rows["q3"].positive_triples == (4,) and rows["q3"].selector == VOTED_SELECTOR
    # counted on q1 alone, the tie stays a tie: both paths keep their triples, for q2 too
    rows = weak_rows(samples, config, train_ids={"q1"})
    assert rows["q1"].positive_triples == (0, 1) and rows["q2"].positive_triples == (2, 3)
    with pytest.raises(ValueError, match="train_ids"):
        weak_rows(samples, config)
    with pytest.raises(ValueError, match="rule: answer_f1"):
        LabelConfig(template_vote=True)
