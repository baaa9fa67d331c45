"""Planner training (rg.training.planner_data / planner_loop): targets from refined labels with
the weak fallback, a tiny planner overfitting a handful of synthetic questions to their exact
paths, checkpoint round trips (tiny base and a local 'pretrained' folder), and the evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from rg.data.sample import Sample
from rg.graph.kg import KnowledgeGraph
from rg.retrievers.planner import (
    DecodeConfig,
    PlannerConfig,
    PlannerModel,
    evaluate_planner,
    load_planner,
    plan_questions,
    read_planner_meta,
    score_plans,
)
from rg.retrievers.planner.plan import Plan, PlannedPath
from rg.data.labels import Labels
from rg.evaluation.references import reference_paths
from rg.jobs.weak_labels import weak_rows
from rg.supervision.labels import LabelConfig, weak_paths_of
from rg.supervision.weak import WeakConfig
from rg.training.planner_data import plan_targets, target_rows
from rg.training.planner_loop import PlannerFitConfig, collate, epoch_lr, evaluate_examples, fit_planner
from tests.synthetic_data import synthetic_subgraphs

TINY = {"layers": 2, "hidden": 32, "heads": 4, "max_positions": 48}


@pytest.fixture(scope="module")
def synthetic_samples() -> list[Sample]:
    """Synthetic questions with subgraphs capped at 300 triples (gold relation paths known)."""
    return synthetic_subgraphs(questions=60, max_triples=300, seed=1).samples


@pytest.fixture(scope="module")
def overfit(synthetic_samples):
    """A tiny planner trained to its fixed point on 8 single-topic questions with one weak path each."""
    chosen = [s for s in synthetic_samples if len(s.q_entities) == 1 and weak_paths_of(s, WeakConfig())][:8]
    targets, _ = plan_targets(chosen, weak_rows(chosen, LabelConfig()), max_paths=1, max_len=3)
    config = PlannerConfig(tiny=TINY, lora={"dropout": 0.0}, max_prompt_tokens=32)
    relations = {r for s in chosen for _, r, _ in s.triples}
    torch.manual_seed(0)
    planner = PlannerModel.build(config, [s.question for s in chosen], relations)
    examples = planner.examples(target_rows(targets))
    result = fit_planner(planner, examples, examples, PlannerFitConfig(epochs=60, batch_size=8, lr=0.01))
    planner.load_trainable_state(result.best_state)
    return planner.eval(), chosen, targets, result


def test_targets_are_the_relation_paths_of_the_labels_rows():
    triples = (("A", "directed_by", "Ann"), ("A", "written_by", "Ann"), ("A", "starring", "Bob"), ("B", "directed_by", "Ann"))
    one = Sample("q1", "who directed A", ("Ann",), ("A",), ("Ann",), triples)
    two = Sample("q2", "who stars in A", ("Bob",), ("A",), ("Bob",), triples)
    three = Sample("q3", "what did Ann direct", ("A", "B"), ("Ann",), ("A", "B"), triples)
    refined = Labels("q1", (0,), ("A → [directed_by] → Ann",), (("directed_by",),), "refined", "llm:m")
    empty = Labels("q2", (), (), (), "weak", "llm:m", fallback_reason="parse_error")
    rows = {"q1": refined, "q2": empty, **weak_rows([three], LabelConfig())}
    targets, stats = plan_targets([one, two, three], rows)
    by_id = {t.id: t for t in targets}
    assert by_id["q1"].relation_paths == (("directed_by",),) and by_id["q1"].source == "refined"
    assert "q2" not in by_id  # its row has no path: nothing is searched here
    # Ann → A and Ann → B via directed_by^-1 (2 answers) ranks before written_by^-1 (1 answer)
    assert by_id["q3"].relation_paths == (("directed_by^-1",), ("written_by^-1",)) and by_id["q3"].source == "weak"
    assert stats.to_dict() == {"questions_refined": 1, "questions_weak": 1, "questions_without_path": 1,
                               "paths_too_long": 0, "paths_capped": 0, "paths_outvoted": 0}
    capped, capped_stats = plan_targets([three], rows, max_paths=1)
    assert capped[0].relation_paths == (("directed_by^-1",),) and capped_stats.capped == 1
    _, long_stats = plan_targets([three], rows, max_len=0)
    assert long_stats.no_path == 1 and long_stats.too_long == 2
    assert target_rows(targets)[-1] == ("q3", "what did Ann direct", ("written_by^-1",))
    gold = reference_paths([one, three], {"q1": refined})  # evaluation falls back to weak paths; training never does
    assert gold == {"q1": (("directed_by",),), "q3": (("directed_by^-1",), ("written_by^-1",))}


def test_examples_mask_the_prompt(overfit):
    planner, _, targets, _ = overfit
    example = planner.examples([("x", "who directed it", ("film.film.directed_by",))])[0]
    prompt_len = len(planner.prompt_ids(["who directed it"])[0])
    assert example.labels[:prompt_len] == (-100,) * prompt_len
    assert example.input_ids[prompt_len:] == example.labels[prompt_len:]
    assert example.input_ids[prompt_len - 1] == planner.vocab.start
    batch = collate([example, planner.examples([("y", "q", ("film.film.genre",))])[0]], planner.vocab.pad)
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert int(batch["attention_mask"][1].sum()) < batch["input_ids"].shape[1]
    with pytest.raises(ValueError, match="exceeds max_path_len"):
        planner.examples([("z", "q", ("film.film.genre",) * 4)])


def test_tiny_planner_overfits_to_exact_paths(overfit):
    planner, chosen, targets, result = overfit
    assert result.history[-1]["val_path_exact_match"] == 1.0
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"] / 10
    wanted = {t.id: t.relation_paths[0] for t in targets}
    samples = [s for s in chosen if s.id in wanted]
    assert len(samples) >= 6
    for mode in ("constrained", "unconstrained"):
        plans = plan_questions(planner, samples, DecodeConfig(beam_width=3, mode=mode))
        assert [p.relation_paths[0] for p in plans] == [wanted[s.id] for s in samples], mode
        assert all(p.paths[0].grounded for p in plans)


def test_checkpoint_round_trip(overfit, tmp_path):
    planner, chosen, _, _ = overfit
    folder = planner.save(tmp_path / "ckpt")
    assert {p.name for p in folder.iterdir()} >= {"config.json", "meta.json", "tokenizer", "adapter", "base"}
    assert (folder / "adapter" / "adapter_config.json").is_file()
    meta = read_planner_meta(folder)
    assert meta.kind == "planner" and meta.prompt_ids == ("plan_relation_paths@v1",)
    loaded = load_planner(folder)
    assert not loaded.training and loaded.relations == planner.relations
    config = DecodeConfig(beam_width=4)
    before = plan_questions(planner, chosen, config)
    after = plan_questions(loaded, chosen, config)
    assert [p.relation_paths for p in before] == [p.relation_paths for p in after]
    for a, b in zip(before, after):
        assert [x.score for x in a.paths] == pytest.approx([x.score for x in b.paths], abs=1e-5)
    examples = planner.examples([("x", chosen[0].question, ("film.film.genre",))])
    assert evaluate_examples(loaded, examples)["loss"] == pytest.approx(evaluate_examples(planner, examples)["loss"])
    with pytest.raises(ValueError, match="merged into its base"):
        loaded.save(tmp_path / "again")
    unmerged = PlannerModel.load(folder, merge=False)
    resaved = load_planner(unmerged.save(tmp_path / "again"))
    assert [p.relation_paths for p in plan_questions(resaved, chosen, config)] == [p.relation_paths for p in before]
    twice = load_planner(planner.save(tmp_path / "twice"))  # a second save of one planner writes its base again
    assert [p.relation_paths for p in plan_questions(twice, chosen, config)] == [p.relation_paths for p in before]
    with pytest.raises(FileNotFoundError, match="not a retriever checkpoint"):
        load_planner(tmp_path)


def test_a_local_pretrained_checkpoint_gets_relation_tokens(tmp_path):
    """A saved tiny LLaMA + tokenizer stands in for a pretrained model folder (no downloads)."""
    source = PlannerModel.build(PlannerConfig(tiny={"hidden": 16, "heads": 2}), ["who directed x"], ["rel_a"])
    folder = tmp_path / "llama"
    base = source.lm.get_base_model()
    base.save_pretrained(folder, state_dict=source._base_state)
    source.tokenizer.save_pretrained(folder)
    planner = PlannerModel.build(PlannerConfig(checkpoint=str(folder)), ["who wrote x"], ["rel_a", "rel_b"])
    assert planner.vocab.has("rel_b^-1") and planner.lm.get_base_model().config.vocab_size >= len(planner.tokenizer)
    examples = planner.examples([("q", "who wrote x", ("rel_b",))])
    seen = []
    config = PlannerFitConfig(epochs=2, batch_size=1, lr=0.01, lr_schedule="cosine")
    fit_planner(planner, examples, [], config, on_epoch_end=lambda e, m, opt: seen.append((m["lr"], opt.param_groups[0]["lr"])))
    assert seen == [(0.01, 0.01), (pytest.approx(0.005), pytest.approx(0.005))]  # lr · (1 + cos(π/2)) / 2
    assert epoch_lr(PlannerFitConfig(epochs=4, lr=1.0, lr_schedule="cosine"), 3) == pytest.approx((1 + math.cos(0.75 * math.pi)) / 2)
    assert epoch_lr(PlannerFitConfig(epochs=4, lr=1.0), 3) == 1.0
    planner.save(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "base").exists()  # the base stays in its own folder
    loaded = load_planner(tmp_path / "ckpt")
    assert evaluate_examples(loaded, examples)["loss"] == pytest.approx(evaluate_examples(planner, examples)["loss"], rel=1e-5)


def test_score_plans_on_hand_made_plans():
    sample = Sample("q", "?", ("x", "y"), ("a",), ("x", "y"), (("a", "r", "x"),))
    kg = KnowledgeGraph.from_triples(sample.triples)
    walk = kg.ground("a", ("r",))
    plans = [Plan("q", "unconstrained", (
        PlannedPath(("r",), -0.1, tuple(walk), ()),
        PlannedPath(None, -0.5, (), ()),
        PlannedPath(("s",), -0.9, (), ()),
    ))]
    scores = score_plans(plans, [sample], {"q": [("s",)]})
    assert scores["path_exact_match"] == 0.0 and scores["path_hit"] == 1.0
    assert scores["answer_recall"] == 0.5 and scores["answer_hit"] == 1.0
    assert scores["groundable_fraction"] == pytest.approx(1 / 3) and scores["malformed_fraction"] == pytest.approx(1 / 3)


def test_evaluate_planner_rows(overfit):
    planner, chosen, targets, _ = overfit
    gold = {t.id: t.relation_paths for t in targets}  # the weak paths it was trained on
    rows = evaluate_planner(planner, chosen, gold, beam_widths=(1, 2))
    assert [(r.mode, r.beam_width) for r in rows] == [
        ("constrained", 1), ("constrained", 2), ("unconstrained", 1), ("unconstrained", 2)]
    for row in rows:
        assert row.questions == len(chosen) and row.questions_per_s > 0
        assert 0.0 <= row.answer_recall <= 1.0
    assert rows[0].groundable_fraction == 1.0 and rows[1].groundable_fraction == 1.0
    assert rows[0].path_exact_match == 1.0 and rows[2].path_exact_match == 1.0 and rows[0].answer_recall > 0.5
    grouped = evaluate_planner(planner, chosen, gold, beam_widths=(1,), modes=("constrained",),
                               group_of=lambda s: f"{s.hops}hop")
    groups = [r.group for r in grouped]
    assert groups[0] == "all" and len(groups) == len(set(groups)) > 2
    assert sum(r.questions for r in grouped[1:]) == grouped[0].questions
    assert grouped[0].seconds == pytest.approx(sum(r.seconds for r in grouped[1:]))
    with pytest.raises(ValueError, match="unknown decoding mode"):
        evaluate_planner(planner, chosen, gold, modes=("greedy",))


def test_progress_sees_every_step_of_every_epoch_and_changes_nothing(synthetic_samples):
    chosen = [s for s in synthetic_samples if len(s.q_entities) == 1 and weak_paths_of(s, WeakConfig())][:5]
    targets, _ = plan_targets(chosen, weak_rows(chosen, LabelConfig()), max_paths=1, max_len=3)
    config = PlannerConfig(tiny=TINY, max_prompt_tokens=32)
    relations = {r for s in chosen for _, r, _ in s.triples}
    seen = []

    def progress(batches, label):
        for batch in batches:
            seen.append((label, batch["input_ids"].shape[0]))
            yield batch

    losses = []
    for wrap in (None, progress):
        torch.manual_seed(0)
        planner = PlannerModel.build(config, [s.question for s in chosen], relations)
        examples = planner.examples(target_rows(targets))
        result = fit_planner(planner, examples, [], PlannerFitConfig(epochs=2, batch_size=2, lr=0.01), progress=wrap)
        losses.append([row["train_loss"] for row in result.history])
    assert losses[0] == losses[1]  # the wrapper only watches
    assert [label for label, _ in seen] == ["planner epoch 1/2"] * 3 + ["planner epoch 2/2"] * 3  # 5 examples, 2 a step
    assert sum(size for _, size in seen) == 2 * len(examples)
