"""Planner decoding (rg.retrievers.planner): the relation trie against brute force on random small
graphs, constrained beam search never leaving the graph (random tiny-model weights), the
KV-cached scores against a full forward pass, the path grammar, and config errors."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from rg.config import ConfigError, validate_config
from rg.data.sample import Sample
from rg.graph.kg import KnowledgeGraph
from rg.retrievers.planner import (
    DecodeConfig,
    PlannerConfig,
    PlannerModel,
    TrieConstraint,
    beam_search,
    graph_trie,
    plan_questions,
    relation_labels,
    relation_trie,
    token_trie,
)

RELATIONS = ("r0", "r1", "r2")
MAX_LEN = 3


def random_graph(seed: int) -> tuple[list[tuple[str, str, str]], list[str]]:
    """8-12 entities, 6-16 triples over 3 relations (parallel triples and self-loops allowed), 1-2 topics."""
    rng = random.Random(seed)
    entities = [f"e{i}" for i in range(rng.randint(8, 12))]
    triples = [(rng.choice(entities), rng.choice(RELATIONS), rng.choice(entities)) for _ in range(rng.randint(6, 16))]
    present = sorted({x for h, _, t in triples for x in (h, t)})
    return triples, rng.sample(present, rng.randint(1, 2))


def groundable(kg: KnowledgeGraph, topics: list[str], path: tuple[str, ...]) -> bool:
    return any(kg.ground(t, path) for t in topics)


@pytest.fixture(scope="module")
def planner() -> PlannerModel:
    """A tiny untrained planner (random base weights) whose vocabulary has r0-r2 and r3."""
    config = PlannerConfig(tiny={"layers": 1, "hidden": 16, "heads": 2, "max_positions": 48},
                           max_path_len=MAX_LEN, max_prompt_tokens=32)
    model = PlannerModel.build(config, ["which entity follows e1", "what is e2 linked to"], [*RELATIONS, "r3"])
    return model.eval()


@pytest.mark.parametrize("seed", range(12))
def test_relation_trie_holds_exactly_the_groundable_paths(seed):
    triples, topics = random_graph(seed)
    kg = KnowledgeGraph.from_triples(triples)
    trie = relation_trie(kg, topics, MAX_LEN)
    labels = relation_labels(RELATIONS)
    for n in range(1, MAX_LEN + 1):
        for path in itertools.product(labels, repeat=n):
            assert (path in trie) == groundable(kg, topics, path), path
    assert len(trie) == len(trie.paths()) == len(set(trie.paths()))


def materialise(node) -> dict:
    return {token: materialise(child) for token, child in node.items()}


@pytest.mark.parametrize("seed", range(12))
def test_lazy_graph_trie_equals_the_eager_token_trie(planner, seed):
    triples, topics = random_graph(seed)
    kg = KnowledgeGraph.from_triples(triples)
    eager, skipped = token_trie(relation_trie(kg, topics, MAX_LEN), planner.vocab)
    lazy, stats = graph_trie(kg, topics, planner.vocab, MAX_LEN)
    assert stats.expanded == 0
    assert materialise(lazy) == materialise(eager)
    assert stats.expanded > 0 and stats.skipped == skipped == 0


def test_trie_on_a_hand_made_graph(planner):
    # a -r0-> b -r1-> c ; d -r0-> b  (from a: r0, r0 r1, r0 r0^-1, r0 r0^-1 r0, ...)
    kg = KnowledgeGraph.from_triples([("a", "r0", "b"), ("b", "r1", "c"), ("d", "r0", "b")])
    trie = relation_trie(kg, ["a"], 2)
    assert sorted(trie.paths()) == sorted([
        ("r0",), ("r0", "r1"), ("r0", "r0^-1"),
    ])
    root, skipped = token_trie(trie, planner.vocab)
    v = planner.vocab
    r0, r1, r0_inv = (v.label_to_id[x] for x in ("r0", "r1", "r0^-1"))
    assert skipped == 0
    assert set(root) == {r0}
    assert set(root[r0]) == {v.end, v.sep}
    assert set(root[r0][v.sep]) == {r1, r0_inv}
    assert root[r0][v.sep][r1] == {v.end: {}}
    # a relation without a token is left out and counted
    kg2 = KnowledgeGraph.from_triples([("a", "unknown_rel", "b"), ("a", "r2", "c")])
    root2, skipped2 = token_trie(relation_trie(kg2, ["a"], 1), v)
    assert skipped2 == 1 and set(root2) == {v.label_to_id["r2"]}
    lazy2, stats2 = graph_trie(kg2, ["a"], v, 1)
    assert set(lazy2) == {v.label_to_id["r2"]} and stats2.skipped == 1


@pytest.mark.parametrize("seed", range(8))
def test_constrained_beam_search_never_leaves_the_graph(planner, seed):
    torch.manual_seed(seed)
    with torch.no_grad():  # random adapter weights so each seed decodes differently
        for name, param in planner.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    samples = []
    for i in range(4):
        triples, topics = random_graph(100 * seed + i)
        samples.append(Sample(f"q{i}", "what is e1 linked to", (), tuple(topics), (), tuple(triples)))
    for k in (1, 3, 8):
        plans = plan_questions(planner, samples, DecodeConfig(beam_width=k, mode="constrained"))
        for plan, sample in zip(plans, samples):
            kg = KnowledgeGraph.from_triples(sample.triples)
            paths = plan.relation_paths
            assert 0 < len(paths) <= min(k, len(relation_trie(kg, list(sample.q_entities), MAX_LEN)))
            assert len(set(paths)) == len(paths)
            scores = [p.score for p in plan.paths]
            assert scores == sorted(scores, reverse=True)
            for planned in plan.paths:
                assert planned.relation_path is not None and len(planned.relation_path) <= MAX_LEN
                assert groundable(kg, list(sample.q_entities), planned.relation_path)
                assert planned.grounded
                for walk in planned.groundings:
                    assert walk.relation_path == planned.relation_path
                    assert walk.start in sample.q_entities
                    assert all(kg.triple(t) == tr for t, tr in zip(walk.triple_ids, walk.triples()))
            assert set(plan.triple_ids) <= set(range(len(sample.triples)))


def test_beam_scores_match_a_full_forward_pass(planner):
    kg = KnowledgeGraph.from_triples([("a", "r0", "b"), ("b", "r1", "c"), ("c", "r2", "a"), ("b", "r2", "b")])
    trie, _ = token_trie(relation_trie(kg, ["a"], MAX_LEN), planner.vocab)
    prompts = planner.prompt_ids(["which entity follows e1", "what"])  # different lengths: left padding
    assert len(prompts[0]) != len(prompts[1])
    for tries in ([trie, trie], None):
        for prompt, beams in zip(prompts, beam_search(planner, prompts, 4, tries)):
            for beam in beams:
                ids = torch.tensor([prompt + list(beam.tokens)])
                with torch.no_grad():
                    logp = torch.log_softmax(planner.lm(input_ids=ids).logits[0].float(), dim=-1)
                expected = sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(beam.tokens))
                assert beam.score == pytest.approx(expected, abs=1e-4)


def test_empty_trie_gives_no_paths_and_unconstrained_reports_malformed(planner):
    isolated = Sample("q", "what", (), ("zz",), (), (("a", "r0", "b"),))  # topic absent from the graph
    plan = plan_questions(planner, [isolated], DecodeConfig(beam_width=3))[0]
    assert plan.paths == () and plan.skipped_relations == 0
    free = plan_questions(planner, [isolated], DecodeConfig(beam_width=3, mode="unconstrained"))[0]
    assert len(free.paths) == 3 and not any(p.grounded for p in free.paths)


def test_path_grammar_round_trip(planner):
    v = planner.vocab
    ids = v.encode(("r0", "r1^-1"))
    assert ids == [v.label_to_id["r0"], v.sep, v.label_to_id["r1^-1"], v.end]
    assert v.parse(ids) == ("r0", "r1^-1")
    assert v.parse(ids + [v.pad, v.pad]) == ("r0", "r1^-1")
    assert v.parse(ids[:-1]) is None  # unfinished
    assert v.parse([v.sep, *ids]) is None
    assert v.parse([v.label_to_id["r0"], v.label_to_id["r1"], v.end]) is None  # missing <SEP>
    assert v.parse([v.end]) is None
    with pytest.raises(KeyError, match="no planner token"):
        v.encode(("nope",))
    tokens = planner.tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["<r:r0>", "<SEP>", "<r:r1^-1>", "</PATH>"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"checkpoint": "x", "tiny": {}}, "either `checkpoint`.*or `tiny`"),
        ({"tokenizer": {"kind": "checkpoint"}}, "tokenizer.kind: checkpoint` needs `checkpoint`"),
        ({"checkpoint": "x", "tokenizer": {"kind": "word"}}, "set `tokenizer.kind: checkpoint`"),
        ({"checkpoint": "x", "lora": {"modules_to_save": []}}, "lora.modules_to_save"),
        ({"prompt_id": "nope@v1"}, "unknown planner prompt 'nope@v1'"),
        ({"tiny": {"hidden": 30, "heads": 4}}, r"tiny.hidden \(30\) must be a multiple of tiny.heads"),
        ({"lora": {"rank": 0}}, r"lora.rank: .*greater than or equal to 1"),
        ({"lora": {"rnak": 4}}, "did you mean 'rank'"),
    ],
)
def test_config_errors_name_the_field(data, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(data, PlannerConfig)


def test_default_config_is_a_tiny_model_and_checkpoint_takes_its_tokenizer():
    assert PlannerConfig().tiny is not None
    pretrained = PlannerConfig(checkpoint="some/folder")
    assert pretrained.tiny is None and pretrained.tokenizer.kind == "checkpoint"
    assert PlannerConfig.model_validate_json(pretrained.model_dump_json()) == pretrained


def test_tiny_positions_must_fit_prompt_and_path():
    with pytest.raises(ValueError, match=r"tiny.max_positions \(16\) < max_prompt_tokens \+ 2 × max_path_len \(22\)"):
        PlannerConfig(tiny={"hidden": 16, "heads": 2, "max_positions": 16}, max_prompt_tokens=16)


def test_scorer_hands_out_the_decoded_paths_of_its_last_call(planner, tmp_path):
    from rg.retrievers.planner.scorer import PlannerScorer, path_shares

    triples, topics = random_graph(5)
    sample = Sample("q1", "which entity follows e1", (), tuple(topics), (), tuple(triples))
    scorer = PlannerScorer(planner.save(tmp_path / "planner"), DecodeConfig(beam_width=3))
    [scores] = scorer.score([sample])
    assert scores.shape == (len(triples),)
    decoded = scorer.decoded_paths("q1")
    [plan] = scorer.plans
    assert [path for path, _ in decoded] == [p.relation_path for p in plan.paths]
    assert [share for _, share in decoded] == pytest.approx(list(path_shares(plan)))
    assert sum(share for _, share in decoded) == pytest.approx(1.0)
    with pytest.raises(KeyError, match="'q2' was not planned by the last score"):
        scorer.decoded_paths("q2")


def bigram_planner(relations: tuple[str, ...], table: dict[str, dict[str, float]]) -> PlannerModel:
    """A planner whose next-token logits depend on the current token only, as ``table`` sets them.

    One decoder block with zero output projections (attention and MLP add nothing to the residual),
    one-hot embeddings and an output layer holding ``table[current][next]`` (-20 where absent).
    """
    def build(hidden: int) -> PlannerModel:
        config = PlannerConfig(tiny={"layers": 1, "hidden": hidden, "heads": 1, "max_positions": 48},
                               max_path_len=2, max_prompt_tokens=16, lora={"modules_to_save": []})
        return PlannerModel.build(config, ["which"], relations)

    size = len(build(8).tokenizer)
    hidden = size + size % 2  # RoPE needs an even head width
    planner = build(hidden).eval()
    base, ids = planner.lm.get_base_model(), planner.tokenizer.convert_tokens_to_ids
    logits = torch.full((size, size), -20.0)  # (current, next)
    for current, row in table.items():
        for nxt, value in row.items():
            logits[ids(current), ids(nxt)] = value
    with torch.no_grad():
        base.model.embed_tokens.weight.copy_(torch.eye(size, hidden))
        base.lm_head.weight.zero_()
        base.lm_head.weight[:, :size] = logits.T / hidden ** 0.5  # the final RMSNorm scales a one-hot row to sqrt(hidden)
        base.model.layers[0].self_attn.o_proj.weight.zero_()
        base.model.layers[0].mlp.down_proj.weight.zero_()
        base.model.norm.weight.fill_(1.0)
    planner.bigram = {k: torch.log_softmax(logits[ids(k)], dim=-1) for k in table}  # log p(next | current)
    return planner


def test_finished_paths_keep_their_place_against_running_beams():
    """``generate``'s pool of finished paths (num_beams=2, length_penalty=0): a finished path does
    not take one of the k running slots, so a complete path is not crowded out.

    From <PATH>: a (best), b. After a: </PATH> almost surely; after b: <SEP>. After <SEP> the model
    prefers z (allowed only after `a <SEP>`) to y (allowed only after `b <SEP>`). The old hand loop's
    two slots after step 2 held the finished `a` and the running `b <SEP>`, so `a <SEP> z` was never
    expanded and `b <SEP> y` (much less likely) came second. Now `a` waits in the finished pool, the
    two running beams are `b <SEP>` and `a <SEP>`, and `a <SEP> z` comes second.
    """
    table = {
        "<PATH>": {"<r:a>": 5.0, "<r:b>": 4.8},
        "<r:a>": {"</PATH>": 5.0, "<SEP>": 0.0},
        "<r:b>": {"<SEP>": 5.0, "</PATH>": 0.0},
        "<SEP>": {"<r:z>": 5.0, "<r:y>": -3.0},
        "<r:y>": {"</PATH>": 5.0},
        "<r:z>": {"</PATH>": 5.0},
    }
    planner = bigram_planner(("a", "b", "y", "z"), table)
    v, ids = planner.vocab, planner.tokenizer.convert_tokens_to_ids
    a, b, y, z = (v.label_to_id[r] for r in ("a", "b", "y", "z"))
    trie = {a: {v.end: {}, v.sep: {z: {v.end: {}}}}, b: {v.end: {}, v.sep: {y: {v.end: {}}}}}
    prompts = planner.prompt_ids(["which"])

    def score(tokens: tuple[str, ...]) -> float:
        seq = ("<PATH>", *tokens)
        return sum(float(planner.bigram[cur][ids(nxt)]) for cur, nxt in zip(seq, seq[1:]))

    a_end, a_z, b_y, b_end = (("<r:a>", "</PATH>"), ("<r:a>", "<SEP>", "<r:z>", "</PATH>"),
                              ("<r:b>", "<SEP>", "<r:y>", "</PATH>"), ("<r:b>", "</PATH>"))
    assert score(a_end) > score(a_z) > score(b_end) > score(b_y)
    # k = 3: at step 2 `b </PATH>` ranks fourth of the candidates, outside the top k that may finish
    # (transformers' rule), so the third path is `b <SEP> y`; from k = 4 all four paths of the trie,
    # best first, and slots beyond them are dropped
    for k, expected in ((1, [a_end]), (2, [a_end, a_z]), (3, [a_end, a_z, b_y]), (4, [a_end, a_z, b_end, b_y]),
                        (6, [a_end, a_z, b_end, b_y])):
        [beams] = beam_search(planner, prompts, k, [trie])
        assert [tuple(planner.tokenizer.convert_ids_to_tokens(list(x.tokens))) for x in beams] == expected, k
        assert [x.score for x in beams] == pytest.approx([score(t) for t in expected], abs=1e-3)
        assert [x.relation_path for x in beams] == [v.parse([ids(t) for t in e]) for e in expected]


def test_trie_constraint_keeps_the_allowed_scores_of_every_beam():
    """The processor on its own: two prompts × two beams, prompts two columns wide, vocabulary 6."""
    tries = [{1: {2: {}, 3: {4: {5: {}}}}}, {}]  # prompt 0: 1 (2 | 3 4 5); prompt 1: an empty trie
    constraint = TrieConstraint(tries, beams=2, prompt_width=2, normalise=False)
    scores = torch.arange(24, dtype=torch.float32).view(4, 6)
    inf = float("-inf")
    step0 = constraint(torch.tensor([[9, 9], [9, 9], [9, 9], [9, 9]]), scores)
    assert step0.tolist() == [[inf, 1, inf, inf, inf, inf], [inf, 7, inf, inf, inf, inf], [inf] * 6, [inf] * 6]
    step2 = constraint(torch.tensor([[9, 9, 1, 3], [9, 9, 1, 2], [9, 9, 0, 0], [9, 9, 1, 3]]), scores)
    assert step2.tolist() == [[inf, inf, inf, inf, 4, inf], [inf] * 6, [inf] * 6, [inf] * 6]
    assert constraint(torch.tensor([[9, 9, 0], [9, 9, 1], [9, 9, 1], [9, 9, 1]]), scores).tolist()[1] == \
        [inf, inf, 8, 9, inf, inf]  # after `1`: 2 or 3, whatever came first (a token outside the trie: nothing)
    normalised = TrieConstraint(tries, beams=2, prompt_width=2, normalise=True)(torch.tensor([[9, 9]] * 4), scores)
    assert float(normalised[0, 1]) == pytest.approx(float(torch.log_softmax(scores[0], dim=-1)[1]))


def test_greedy_decoding_scores_log_probabilities_and_matches_the_best_beam_of_a_width_one_search(planner):
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in planner.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    prompts = planner.prompt_ids(["which entity follows e1", "what", "what is e2 linked to"])
    tries = []
    for i in range(len(prompts)):
        triples, topics = random_graph(40 + i)
        tries.append(graph_trie(KnowledgeGraph.from_triples(triples), topics, planner.vocab, MAX_LEN)[0])
    for constraint in (tries, None):
        greedy = beam_search(planner, prompts, 1, constraint)
        for prompt, beams in zip(prompts, greedy):
            [beam] = beams
            ids = torch.tensor([prompt + list(beam.tokens)])
            with torch.no_grad():
                logp = torch.log_softmax(planner.lm(input_ids=ids).logits[0].float(), dim=-1)
            steps = logp[len(prompt) - 1: len(prompt) - 1 + len(beam.tokens)]
            assert beam.tokens == tuple(steps.argmax(-1).tolist()) or constraint is not None
            assert beam.score == pytest.approx(float(steps.gather(-1, torch.tensor(beam.tokens)[:, None]).sum()),
                                               abs=1e-4)
        if constraint is not None:
            for beams, trie in zip(greedy, constraint):
                node = trie
                for token in beams[0].tokens:
                    node = node[token]
                assert beams[0].tokens[-1] == planner.vocab.end and len(node) == 0
