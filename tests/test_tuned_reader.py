"""The LoRA-tuned local reader: its answer grammar, prompts, training loop and checkpoints (real
SmolLM2-135M tokenizer and weights, no Ray)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rg.evidence import EvidenceConfig, build_evidence
from rg.models import REGISTRY, ModelNotAvailableError
from rg.models.prefix import OpeningCache
from rg.reasoning.answer_grammar import AnswerGrammar
from rg.reasoning.tuned_reader import (
    constrained_greedy,
    template_opening,
    NO_CANDIDATES,
    TunedReader,
    TunedReaderSettings,
    build_prompt,
    elide_machine_ids,
    eos_id,
    load_settings,
)
from rg.training.reader_loop import (
    ReaderFitConfig,
    ReaderItem,
    ReaderLora,
    ReaderLoss,
    fit_reader,
    lora_reader_model,
    reader_examples,
)
from rg.training.planner_loop import collate
from rg.jobs.train_reader import save_reader

TRIPLES = (
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Inception", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "release_year", "2010"),
    ("Titanic", "starred_actors", "Leonardo DiCaprio"),
    ("Titanic", "directed_by", "James Cameron"),
)


@pytest.fixture(scope="module")
def base():
    """The base model with a fresh LoRA adapter (deterministic), and its tokenizer."""
    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    torch.manual_seed(0)
    return lora_reader_model(TunedReaderSettings(), ReaderLora())


def evidence(scores=(0.9, 0.5, 0.4, 0.3, 0.2), topics=("Inception",)):
    return build_evidence(TRIPLES, scores, list(topics), EvidenceConfig(max_length=2))


def nine_one_step_lines():
    """Nine one-step chains from Inception, best first: ``Inception → [relation_i] → Entity i``."""
    relations = [f"relation_{i}" for i in range(9)]
    return build_evidence([("Inception", r, f"Entity {i}") for i, r in enumerate(relations)],
                          [1.0 - i / 10 for i in range(9)], ["Inception"], EvidenceConfig(max_length=1))


def test_grammar_writes_only_listed_names_and_stops(base):
    _, tokenizer = base
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    grammar = AnswerGrammar(["Ann", "Ann Lee", "Bob", ""], tokenizer, eos, max_answers=2)
    ann, ann_lee, bob = (tokenizer(n, add_special_tokens=False)["input_ids"] for n in ("Ann", "Ann Lee", "Bob"))
    assert ann_lee[: len(ann)] == ann  # "Ann" is a prefix of "Ann Lee": the trie must keep both
    assert set(grammar.allowed([])) == {ann[0], bob[0]}
    after_ann = set(grammar.allowed(ann))
    assert after_ann == {ann_lee[len(ann)], eos, grammar.sep[0]}
    reply = grammar.encode(["Ann Lee", "Bob"])
    assert grammar.parse(reply) == ["Ann Lee", "Bob"] and reply[-1] == eos
    # two names written: no separator is offered any more, only the end
    assert set(grammar.allowed(reply[:-1])) == {eos}
    assert grammar.allowed([*bob, 99999]) == [eos]  # a malformed prefix can only end
    assert grammar.parse([*ann, grammar.sep[0], *ann, eos]) == ["Ann"]  # repeats collapse
    assert AnswerGrammar([""], tokenizer, eos).empty


def test_prompt_shows_a_budget_of_lines_and_offers_their_ends(base):
    _, tokenizer = base
    ev = evidence()
    full = build_prompt(tokenizer, TunedReaderSettings(max_lines=10), "who directed Inception", ev)
    assert full.lines == len(ev.items) and set(full.candidates) == set(ev.ends())
    one = build_prompt(tokenizer, TunedReaderSettings(max_lines=1), "who directed Inception", ev)
    assert one.lines == 1 and one.candidates == ("Christopher Nolan",)
    tight = build_prompt(tokenizer, TunedReaderSettings(max_lines=10, max_prompt_tokens=len(one.ids) + 5),
                         "who directed Inception", ev)
    assert tight.lines == 1 and len(tight.ids) <= len(one.ids) + 5


def test_the_prompt_shows_the_most_lines_that_fit_its_budget(base):
    _, tokenizer = base
    ev = nine_one_step_lines()
    assert len(ev.items) == 9
    eight = build_prompt(tokenizer, TunedReaderSettings(max_lines=8), "q", ev)
    for budget, lines in ((len(eight.ids), 8), (len(eight.ids) - 1, 7), (len(eight.ids) + 1, 8)):
        shown = build_prompt(tokenizer, TunedReaderSettings(max_lines=10, max_prompt_tokens=budget), "q", ev)
        assert shown.lines == lines and len(shown.ids) <= budget
        assert shown.candidates == tuple(f"Entity {i}" for i in range(lines))


def test_max_set_cuts_every_set_of_a_line_and_offers_only_the_ends_shown(base):
    _, tokenizer = base
    films = [f"Film {i}" for i in range(5)]
    triples = [("Ann", "directed", f) for f in films] + [(f, "genre", g) for f, g in zip(films, "ABCDE")]
    scores = [0.9 - i / 100 for i in range(5)] + [0.5 - i / 100 for i in range(5)]
    ev = build_evidence(triples, scores, ["Ann"], EvidenceConfig(max_length=2, order="expected_relevant"))
    two_hop = next(item for item in ev.items if len(item) == 2)
    assert two_hop.render(max_set=2) == "Ann → [directed] → {Film 0 | Film 1 | +3 more} → [genre] → {A | B | +3 more}"
    assert two_hop.render(max_set=5) == two_hop.render() and two_hop.shown_ends(2) == ("A", "B")
    prompt = build_prompt(tokenizer, TunedReaderSettings(max_lines=1, max_set=2), "what genres did Ann direct", ev)
    assert prompt.candidates == ("A", "B")
    assert "{A | B | +3 more}" in tokenizer.decode(prompt.ids) and "Film 2" not in tokenizer.decode(prompt.ids)
    assert elide_machine_ids("A → [r] → {m.01 | m.02 | +4 more}") == "A → [r] → *"
    assert elide_machine_ids("A → [r] → {m.01 | Bob | +4 more}") == "A → [r] → {* | Bob | +4 more}"


def test_a_chain_back_to_the_topic_is_shown_but_the_topic_is_never_offered(base):
    model, tokenizer = base
    triples = (("Ann", "directed", "Film"), ("Film", "starred", "Ann"), ("Film", "starred", "Bob"))
    ev = build_evidence(triples, (0.9, 0.8, 0.7), ["Ann"], EvidenceConfig(max_length=2))
    assert "Ann" in ev.ends()  # Ann → [directed] → Film → [starred] → Ann
    prompt = build_prompt(tokenizer, TunedReaderSettings(), "who starred in the films Ann directed", ev)
    assert prompt.lines == len(ev.items) and set(prompt.candidates) == {"Film", "Bob"}
    reader = TunedReader(model, tokenizer, TunedReaderSettings(max_answers=3))
    assert {name for name, _ in reader.answer("who starred in the films Ann directed", ev)} <= {"Film", "Bob"}


def test_machine_ids_are_elided_and_never_offered(base):
    _, tokenizer = base
    cvt = (("Ann", "education", "m.0ljgpd"), ("m.0ljgpd", "institution", "Varport"),
           ("m.0ljgpd", "degree", "m.0aa1"), ("Ann", "spouse", "m.0rr9"))
    ev = build_evidence(cvt, (0.9, 0.8, 0.7, 0.1), ["Ann"], EvidenceConfig(max_length=2))
    shown = build_prompt(tokenizer, TunedReaderSettings(), "where did Ann study", ev)
    raw = build_prompt(tokenizer, TunedReaderSettings(machine_ids="shown"), "where did Ann study", ev)
    assert shown.candidates == ("Varport",)  # the lines ending at m.0ljgpd, m.0aa1 and m.0rr9 are skipped
    assert set(raw.candidates) == {"Varport", "m.0ljgpd", "m.0aa1", "m.0rr9"} and raw.lines == len(ev.items)
    text = tokenizer.decode(shown.ids)
    assert "Ann → [education] → * → [institution] → Varport" in text and "m.0" not in text
    for line, elided in [
        ("A → [r] → {m.01 | g.1x_2} ← [s] ← {m.02 | Bob}", "A → [r] → * ← [s] ← {* | Bob}"),
        ("m. night shyamalan → [r] → g.i. joe", "m. night shyamalan → [r] → g.i. joe"),
        ("g.i joe → [r] → m.01 & m.c escher ← [s] ← g.2", "g.i joe → [r] → * & m.c escher ← [s] ← *"),
        ("m.01 → [r] → {g.i joe | m.02}", "* → [r] → {g.i joe | *}"),
    ]:
        assert elide_machine_ids(line) == elided


def test_the_terse_prompt_shows_more_lines_in_the_same_budget_and_is_recorded(base):
    _, tokenizer = base
    ev = nine_one_step_lines()
    full = TunedReaderSettings(max_lines=10, max_prompt_tokens=120)
    terse = TunedReaderSettings(max_lines=10, max_prompt_tokens=120, prompt_id="read_tuned_terse")
    assert terse.prompt_id == "read_tuned_terse@v1" and full.prompt_id == "read_tuned@v1"
    wordy, short = (build_prompt(tokenizer, s, "q", ev) for s in (full, terse))
    assert short.lines > wordy.lines and short.candidates[: wordy.lines] == wordy.candidates
    assert "Answer from knowledge-graph evidence." in tokenizer.decode(short.ids)
    assert "Answer from knowledge-graph evidence." not in tokenizer.decode(wordy.ids)
    with pytest.raises(ValueError, match="unknown tuned reader prompt 'read_tuned@v9'.*read_tuned_terse"):
        TunedReaderSettings(prompt_id="read_tuned@v9")


def test_a_checkpoint_before_machine_ids_reads_them_as_it_was_trained(tmp_path):
    (tmp_path / "reader.json").write_text('{"base": "smollm2-135m", "max_lines": 3}')
    assert load_settings(tmp_path).machine_ids == "shown" and TunedReaderSettings().machine_ids == "elided"
    (tmp_path / "reader.json").write_text(TunedReaderSettings(max_lines=3).model_dump_json())
    assert load_settings(tmp_path).machine_ids == "elided"


def test_untrained_reader_answers_only_from_the_shown_lines(base):
    model, tokenizer = base
    reader = TunedReader(model, tokenizer, TunedReaderSettings(max_lines=2, max_answers=3))
    ev = evidence()
    shown = build_prompt(tokenizer, reader.settings, "who starred in Inception", ev).candidates
    reading = asyncio.run(reader.read("who starred in Inception", ev))
    assert reading.reader == "tuned:smollm2-135m+lora" and reading.prompt_id == "read_tuned@v1"
    assert reading.ok and 1 <= len(reading.answers) <= 3 and set(reading.answers) <= set(shown)
    assert all(a.score is not None and a.score <= 0 for a in reading.ranked)
    empty = build_evidence((), (), ["Inception"], EvidenceConfig())
    nothing = asyncio.run(reader.read("who directed Inception", empty))
    assert nothing.fallback == NO_CANDIDATES and nothing.answers == ()


def test_the_template_opening_is_cached_once_and_reads_as_the_whole_prompt(base):
    model, tokenizer = base
    settings = TunedReaderSettings(max_lines=3, max_answers=3, prompt_id="read_tuned_terse@v1")
    opening = template_opening(tokenizer, settings)
    question = "who starred in Inception"
    ids = build_prompt(tokenizer, settings, question, evidence()).ids
    assert 10 < len(opening) < len(ids) and ids[: len(opening)] == opening
    assert tokenizer.decode(opening).endswith("Question:")
    cached = TunedReader(model, tokenizer, settings)
    whole = TunedReader(model, tokenizer, settings)
    whole.opening = OpeningCache(model, [])  # no opening: every prompt runs whole
    assert whole.opening.for_prompt(ids) is None and cached.opening.for_prompt(opening) is None
    first = cached.opening.for_prompt(ids)
    assert first.get_seq_length() == len(opening) and cached.opening.for_prompt(ids) is not first  # a copy each
    for q in (question, "which films did Christopher Nolan direct"):
        with_cache, without = cached.answer(q, evidence()), whole.answer(q, evidence())
        assert [n for n, _ in with_cache] == [n for n, _ in without] and with_cache
        assert [s for _, s in with_cache] == pytest.approx([s for _, s in without], abs=1e-4)
    assert cached.opening.for_prompt(ids).get_seq_length() == len(opening)  # generation grew copies only


@torch.inference_mode()
def test_jump_forward_decoding_writes_and_scores_what_generate_does(base):
    model, tokenizer = base
    model.eval()
    settings = TunedReaderSettings(max_lines=4, max_answers=3)
    eos = eos_id(tokenizer, model)
    for question in ("who starred in Inception", "who directed Inception", "which films did Nolan make"):
        prompt = build_prompt(tokenizer, settings, question, evidence())
        grammar = AnswerGrammar(prompt.candidates, tokenizer, eos, settings.max_answers)
        width = len(prompt.ids)
        reference = model.generate(
            input_ids=torch.tensor([prompt.ids]), attention_mask=torch.ones((1, width), dtype=torch.long),
            max_new_tokens=40, do_sample=False, num_beams=1, eos_token_id=eos, pad_token_id=eos,
            prefix_allowed_tokens_fn=lambda _row, seq: grammar.allowed(seq[width:].tolist()),
            output_scores=True, return_dict_in_generate=True, temperature=None, top_p=None, top_k=None)
        expected = reference.sequences[0, width:].tolist()
        expected_logprobs = [float(torch.log_softmax(step[0].float(), -1)[token])
                             for step, token in zip(reference.scores, expected)]
        calls = []
        hook = model.register_forward_pre_hook(lambda *_: calls.append(1))
        try:
            written, logprobs = constrained_greedy(model, prompt.ids, grammar, 40)
        finally:
            hook.remove()
        assert written == expected and written[-1] == eos and grammar.parse(written)
        assert logprobs == pytest.approx(expected_logprobs, abs=1e-4)
        forced = sum(len(grammar.allowed(written[:i])) == 1 for i in range(1, len(written)))
        assert len(calls) == len(written) - forced < len(written)  # one pass per choice, none per forced token


def test_loss_on_target_tokens_only_matches_the_full_loss(base):
    model, tokenizer = base
    items = [ReaderItem("a", "who directed Inception", evidence(), ("Christopher Nolan",)),
             ReaderItem("b", "who starred in Inception", evidence(), ("Leonardo DiCaprio",))]
    examples, skipped = reader_examples(items, tokenizer, TunedReaderSettings(), eos_id(tokenizer, model))
    assert skipped == 0 and len(examples) == 2
    batch = collate(examples, tokenizer.pad_token_id, side="left")
    model.eval()
    with torch.no_grad():
        fast = ReaderLoss(model)(**batch)
        positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=positions,
                     labels=batch["labels"]).loss
    assert torch.allclose(fast, full, atol=1e-4)


def test_training_teaches_the_reader_and_the_checkpoint_reads_back(tmp_path):
    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    torch.manual_seed(0)
    settings = TunedReaderSettings(max_answers=2)
    model, tokenizer = lora_reader_model(settings, ReaderLora(rank=8, alpha=32))
    # "who wrote X" is answered by the 3rd line here: the base model has no reason to pick it.
    triples = TRIPLES + (("Inception", "written_by", "Jonah Q"),)
    ev = build_evidence(triples, (0.9, 0.8, 0.7, 0.3, 0.2, 0.6), ["Inception"], EvidenceConfig(max_length=1))
    item = ReaderItem("w", "who wrote Inception", ev, ("Jonah Q",))
    examples, _ = reader_examples([item], tokenizer, settings, eos_id(tokenizer, model))
    history = fit_reader(model, tokenizer, examples * 4, [item], settings,
                         ReaderFitConfig(epochs=3, lr=3e-3, batch_size=4))
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_hits_at_1"] == 1.0

    folder = save_reader(model, settings, tmp_path / "reader")
    loaded = TunedReader.load(folder)
    assert [name for name, _ in loaded.answer(item.question, ev)][0] == "Jonah Q"


def test_compact_lines_keep_the_last_part_of_dotted_relations():
    from rg.reasoning.tuned_reader import compact_line

    line = "Film X → [film.film.directed_by] → Ann B. & Ann B. ← [people.person.nationality] ← Bob [1.5]"
    assert compact_line(line) == "Film X → [directed_by] → Ann B. & Ann B. ← [nationality] ← Bob [1.5]"
    assert compact_line("A → [directed_by] → B") == "A → [directed_by] → B"


def test_top_layers_adapts_only_the_last_layers(base):
    model, _ = lora_reader_model(TunedReaderSettings(), ReaderLora(top_layers=3))
    adapted = {int(name.split(".layers.")[1].split(".")[0]) for name, p in model.named_parameters()
               if p.requires_grad}
    assert adapted == {27, 28, 29}  # SmolLM2-135M has 30 decoder layers
    with pytest.raises(ValueError, match=r"lora.top_layers \(31\) exceeds the base model's 30 layers"):
        lora_reader_model(TunedReaderSettings(), ReaderLora(top_layers=31))


def test_a_qa_run_with_other_evidence_settings_than_the_readers_training_is_warned_about(tmp_path, capsys):
    from rg.jobs.evaluate_qa import QAEvaluateConfig, reader_evidence_mismatch
    from rg.evidence import EvidenceConfig
    from rg.reasoning.tuned_reader import SETTINGS_FILE, TunedReaderSettings, evidence_mismatch

    trained = EvidenceConfig(order="expected_relevant")
    (tmp_path / SETTINGS_FILE).write_text(TunedReaderSettings(evidence=trained).model_dump_json())
    assert evidence_mismatch(tmp_path, trained) == {}
    assert evidence_mismatch(tmp_path, EvidenceConfig()) == {"order": ["expected_relevant", "strength"]}
    old = tmp_path / "old"  # a checkpoint written before the settings were recorded, and no checkpoint at all
    old.mkdir()
    (old / SETTINGS_FILE).write_text(TunedReaderSettings().model_dump_json(exclude={"evidence"}))
    assert evidence_mismatch(old, EvidenceConfig()) == {}
    assert evidence_mismatch(tmp_path / "missing", EvidenceConfig()) == {}

    cfg = QAEvaluateConfig.model_validate({
        "input": str(tmp_path), "output_dir": str(tmp_path / "qa"), "retriever": {"kind": "hop_distance"},
        "reader": {"kind": "tuned", "checkpoint": str(tmp_path)}})
    assert reader_evidence_mismatch(cfg) == {"order": ["expected_relevant", "strength"]}
    err = capsys.readouterr().err
    assert "trained on other evidence settings (order: trained 'expected_relevant', used 'strength')" in err
    assert "Fix: set the same `evidence` values" in err
    same = cfg.model_copy(update={"evidence": trained})
    assert reader_evidence_mismatch(same) == {} and capsys.readouterr().err == ""


_BF16_CHECK = """
import json, sys, tempfile, torch
from pathlib import Path
from rg.evidence import EvidenceConfig, build_evidence
from rg.reasoning.tuned_reader import TunedReader, TunedReaderSettings, build_prompt, eos_id
from rg.training.planner_loop import collate
from rg.training.reader_loop import ReaderItem, ReaderLora, ReaderLoss, lora_reader_model, reader_examples
from rg.jobs.train_reader import save_reader
triples, scores = json.loads(sys.argv[1])
ev = build_evidence([tuple(t) for t in triples], scores, ["Inception"], EvidenceConfig(max_length=2))
out = {}
models = {}
for precision in ("fp32", "bf16"):
    torch.manual_seed(0)
    models[precision], tokenizer = lora_reader_model(TunedReaderSettings(precision=precision), ReaderLora())
bf16 = models["bf16"]
out["base"] = str(bf16.get_base_model().dtype)
out["adapter"] = sorted({str(p.dtype) for p in bf16.parameters() if p.requires_grad})
item = ReaderItem("a", "who directed Inception", ev, ("Christopher Nolan",))
examples, _ = reader_examples([item], tokenizer, TunedReaderSettings(), eos_id(tokenizer, bf16))
batch = collate(examples, tokenizer.pad_token_id, side="left")
with torch.no_grad():
    out["loss"] = {p: float(ReaderLoss(m.eval())(**batch)) for p, m in models.items()}
settings = TunedReaderSettings(precision="bf16")
loaded = TunedReader.load(save_reader(bf16, settings, Path(tempfile.mkdtemp()) / "reader"))
out["read_dtype"] = str(next(loaded.model.parameters()).dtype)
out["answers"] = [name for name, _ in loaded.answer(item.question, ev)]
out["shown"] = list(build_prompt(tokenizer, settings, item.question, ev).candidates)
print(json.dumps(out))
"""


def test_bf16_base_trains_an_fp32_adapter_to_the_same_loss_and_reads_back_in_bf16(base):
    """Run without the tests' AVX2 pin (conftest), which torch's bf16 attention cannot run under."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    probe = "from rg.models.precision import native_bf16; print(native_bf16(cuda=False))"
    if subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.strip() != "True":
        pytest.skip("this CPU has no native bf16 units (AVX512-BF16 or AMX), where precision 'auto' is fp32")
    scores = (0.9, 0.5, 0.4, 0.3, 0.2)
    done = subprocess.run([sys.executable, "-c", _BF16_CHECK, json.dumps([TRIPLES, scores])], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["base"] == "torch.bfloat16" and out["adapter"] == ["torch.float32"]  # optimiser state stays fp32
    assert out["loss"]["bf16"] == pytest.approx(out["loss"]["fp32"], rel=0.05)
    assert out["read_dtype"] == "torch.bfloat16" and 1 <= len(out["answers"]) and set(out["answers"]) <= set(out["shown"])


def test_a_checkpoint_before_precision_reads_in_fp32(tmp_path):
    (tmp_path / "reader.json").write_text(TunedReaderSettings().model_dump_json(exclude={"precision"}))
    assert load_settings(tmp_path).precision == "fp32"
    assert TunedReaderSettings().precision == "auto"


def test_shuffled_lines_show_the_same_lines_in_another_order_with_the_same_target(base):
    model, tokenizer = base
    settings, eos = TunedReaderSettings(), eos_id(tokenizer, model)
    items = [ReaderItem(f"q{i}", "who directed Inception", evidence(), ("Christopher Nolan",)) for i in range(8)]
    kept, _ = reader_examples(items, tokenizer, settings, eos)
    shuffled, skipped = reader_examples(items, tokenizer, settings, eos, shuffle_lines=1.0, seed=3)
    again, _ = reader_examples(items, tokenizer, settings, eos, shuffle_lines=1.0, seed=3)
    assert skipped == 0 and [e.input_ids for e in shuffled] == [e.input_ids for e in again]  # seeded

    def lines(example):
        prompt = [t for t, label in zip(example.input_ids, example.labels) if label == -100]
        text = tokenizer.decode(prompt)
        return text[text.index("Evidence:\n") + len("Evidence:\n"):].split("<|im_end|>")[0].strip().split("\n")

    def target(example):
        return tokenizer.decode([t for t in example.labels if t != -100])

    order = lines(kept[0])
    assert len(order) >= 3 and all(lines(e) == order for e in kept)
    assert all(sorted(lines(e)) == sorted(order) for e in shuffled)
    assert any(lines(e) != order for e in shuffled)  # 8 draws of a 3+-line order: the same every time is ~1e-6
    assert {target(e) for e in kept + shuffled} == {"Christopher Nolan<|im_end|>"}
    none, _ = reader_examples(items, tokenizer, settings, eos, shuffle_lines=0.0, seed=3)
    assert [e.input_ids for e in none] == [e.input_ids for e in kept]
