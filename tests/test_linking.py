"""Entity linking (rg.linking): exact outputs on a tiny hand-made KG, index round trip, jobs and configs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rg.config import ConfigError, validate_config
from rg.jobs.build_subgraphs import BuildSubgraphsConfig
from rg.data.sample import Question
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.graph import KnowledgeGraph
from rg.linking import EntityLinker, LinkingConfig, NameIndex, load_or_build_index
from rg.linking.index import index_bytes
from rg.linking.names import NamedEntity, store_names
from rg.linking.questions import link_questions
from rg.stores import MemoryStore
from rg.text.encoder import TextEncoder

TRIPLES = [
    ("m.1", "film.actor.film", "m.2"),
    ("m.6", "film.director.film", "m.2"),
    ("m.3", "film.film.director", "m.8"),
    ("m.4", "film.film.director", "m.6"),
    ("m.5", "people.person.place_of_birth", "m.7"),
    ("m.9", "film.film.country", "m.7"),
]
NAMES = {"m.1": "Tom Hanks", "m.2": "Forrest Gump", "m.3": "Heat", "m.4": "Heat", "m.5": "Beyoncé Knowles",
         "m.6": "Robert Zemeckis", "m.7": "New York City", "m.8": "Michael Mann"}  # m.9 has no name
ALIASES = {"m.7": ["NYC"], "m.5": ["Queen B"]}


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return TextEncoder()


@pytest.fixture(scope="module")
def index(encoder: TextEncoder) -> NameIndex:
    store = MemoryStore(KnowledgeGraph.from_triples(TRIPLES), NAMES)
    return NameIndex.build(store_names(store, aliases=ALIASES), encoder, "tiny")


def linker(index: NameIndex, encoder: TextEncoder, **settings) -> EntityLinker:
    return EntityLinker(index, LinkingConfig(**settings), encoder)


def test_store_names_skip_unnamed_ids_and_add_aliases() -> None:
    store = MemoryStore(KnowledgeGraph.from_triples(TRIPLES), NAMES)
    names = store_names(store, LinkingConfig().unnamed_pattern, ALIASES)
    assert NamedEntity("m.7", "NYC", "alias") in names and NamedEntity("m.7", "New York City") in names
    assert [n.entity_id for n in names].count("m.9") == 0  # named by its machine id: no name
    assert len(names) == 8 + 2


def test_exact_match(index: NameIndex, encoder: TextEncoder) -> None:
    result = linker(index, encoder).link("who directed Forrest Gump")
    assert result.entities == ("m.2",) and result.failure is None
    (mention,) = result.mentions
    assert (mention.text, mention.start, mention.end) == ("Forrest Gump", 2, 4)
    assert [(c.entity_id, c.match, c.score) for c in mention.candidates] == [("m.2", "exact", 1.0)]


def test_odd_forms_and_aliases(index: NameIndex, encoder: TextEncoder) -> None:
    link = linker(index, encoder)
    odd = link.link("who directed ＦＯＲＲＥＳＴ  gu\u200bmp?")
    assert odd.entities == ("m.2",) and odd.mentions[0].candidates[0].match == "normalised"
    assert odd.mentions[0].score == 0.95
    accents = link.link("where was beyonce knowles born")
    assert accents.entities == ("m.5",) and accents.mentions[0].candidates[0].match == "normalised"
    alias = link.link("which films were shot in NYC")
    assert alias.entities == ("m.7",)
    assert [(c.name, c.match, c.score) for c in alias.mentions[0].candidates] == [("NYC", "alias", 0.9)]


def test_dense_match_of_a_misspelled_mention(index: NameIndex, encoder: TextEncoder) -> None:
    result = linker(index, encoder, threshold=0.75).link("which movies did Robert Zemekis direct")
    assert result.entities == ("m.6",) and result.failure is None
    (mention,) = result.mentions
    assert mention.text == "Robert Zemekis" and mention.candidates[0].match == "dense"
    assert 0.75 <= mention.score < 1.0


def test_ambiguity_is_returned_not_resolved(index: NameIndex, encoder: TextEncoder) -> None:
    result = linker(index, encoder).link("who directed Heat")
    assert result.failure == "ambiguous" and result.entities == ()
    assert [c.entity_id for c in result.mentions[0].candidates] == ["m.3", "m.4"]
    assert result.mentions[0].ambiguous
    assert result.detail == "'Heat' names 2 entities: m.3, m.4"
    both = linker(index, encoder, on_ambiguous="all").link("who directed Heat")
    assert both.failure is None and both.entities == ("m.3", "m.4")


def test_not_found_and_a_question_naming_no_entity(index: NameIndex, encoder: TextEncoder) -> None:
    strict = linker(index, encoder, threshold=0.95)
    missing = strict.link("what is the capital of Mars")
    assert missing.failure == "not_found" and missing.entities == () and missing.mentions == ()
    assert missing.detail == "no n-gram matches an entity name or aligns with one at cosine >= 0.95"
    nothing = linker(index, encoder, dense="off").link("what is this")
    assert nothing.failure == "not_found" and nothing.detail == "no n-gram matches an entity name"


def test_two_topic_entities(index: NameIndex, encoder: TextEncoder) -> None:
    result = linker(index, encoder).link("did Tom Hanks star in a film by Robert Zemeckis")
    assert result.entities == ("m.1", "m.6")
    assert [m.text for m in result.mentions] == ["Tom Hanks", "Robert Zemeckis"]


def test_case_hint_drops_lowercase_template_words(encoder: TextEncoder) -> None:
    kg = KnowledgeGraph.from_triples([("Heat", "has_tags", "director"), ("Heat", "directed_by", "Michael Mann")])
    index = NameIndex.build(store_names(MemoryStore(kg)), None, "tags")
    cased = EntityLinker(index, LinkingConfig(dense="off")).link("who is the director of Heat")
    assert cased.entities == ("Heat",)
    uncased = EntityLinker(index, LinkingConfig(dense="off", case_hint=False)).link("who is the director of Heat")
    assert uncased.entities == ("director", "Heat")
    lower = EntityLinker(index, LinkingConfig(dense="off")).link("who is the director of heat")
    assert lower.entities == ("director", "Heat")


def test_verbatim_name_and_case_resolve_punctuation_variants() -> None:
    kg = KnowledgeGraph.from_triples([("Murder!", "has_tags", "murder"), ("Them!", "directed_by", "Gordon Douglas"),
                                      ("Them", "directed_by", "David Moreau"), ("Who Am I?", "release_year", "1998")])
    link = EntityLinker(NameIndex.build(store_names(MemoryStore(kg)), None, "p"), LinkingConfig(dense="off"))
    murder = link.link("who directed Murder!")
    assert murder.entities == ("Murder!",) and murder.mentions[0].candidates[0].match == "exact"
    assert link.link("who directed Murder").mentions[0].candidates[0].match == "cased"
    assert link.link("who directed Murder").entities == ("Murder!",)
    assert link.link("who are the actors in Them!").entities == ("Them!",)
    assert link.link("who are the actors in Them").entities == ("Them",)
    assert link.link("the actor of Who Am I? also starred in which movies").entities == ("Who Am I?",)
    assert link.link("who directed murder").entities == ("murder",)  # the tag, verbatim
    shouted = link.link("who directed MURDER")
    assert shouted.failure == "ambiguous"
    assert [c.entity_id for c in shouted.mentions[0].candidates] == ["Murder!", "murder"]


def test_prefer_multiword_drops_lowercase_common_nouns() -> None:
    kg = KnowledgeGraph.from_triples([("James K. Polk", "office", "President")])
    index = NameIndex.build(store_names(MemoryStore(kg)), None, "polk")
    question = "what did james k polk do before he was president"
    assert EntityLinker(index, LinkingConfig(dense="off")).link(question).entities == ("James K. Polk",)
    both = EntityLinker(index, LinkingConfig(dense="off", prefer_multiword=False)).link(question)
    assert both.entities == ("James K. Polk", "President")


def test_a_question_typed_in_lower_case_takes_rare_words_for_capitals() -> None:
    """Without any capital letter, a span with a word the encoder's vocabulary lacks (a made-up place name) counts
    as cased: it survives `prefer_multiword` beside a several-word name, and a common word (a type node) is
    dropped beside it by `case_hint`, as in the question written with its capitals."""
    kg = KnowledgeGraph.from_triples([("Hanna Nyberg", "born_in", "Norhaven"), ("Hanna Nyberg", "studied_at",
                                      "University of Brimport"), ("Yarford", "type", "Country")])
    index = NameIndex.build(store_names(MemoryStore(kg)), None, "typed")
    link = EntityLinker(index, LinkingConfig(dense="off")).link
    for written, typed, topics in (
            ("Who was born in Norhaven and studied at University of Brimport?",
             "who was born in norhaven and studied at university of brimport", ("Norhaven", "University of Brimport")),
            ("Which country is Yarford in?", "which country is yarford in", ("Yarford",))):
        assert link(written).entities == link(typed).entities == topics
    without = EntityLinker(index, LinkingConfig(dense="off", vocabulary_hint=False)).link
    assert without("which country is yarford in").entities == ("Country", "Yarford")
    assert without("who was born in norhaven and studied at university of brimport").entities == (
        "University of Brimport",)


def test_index_save_load_round_trip(index: NameIndex, encoder: TextEncoder, tmp_path: Path) -> None:
    size = index.save(tmp_path / "idx")
    assert size == index_bytes(tmp_path / "idx") > 0
    loaded = NameIndex.load(tmp_path / "idx")
    assert loaded.entries == index.entries and loaded.keys == index.keys and loaded.dense_keys == index.dense_keys
    assert loaded.encoder_id == encoder.model_id and loaded.faiss_index.ntotal == len(index.dense_keys)
    for q in ("who directed Heat", "which movies did Robert Zemekis direct", "films shot in NYC"):
        assert linker(loaded, encoder).link(q) == linker(index, encoder).link(q)
    calls = []

    def names():
        calls.append(1)
        return index.entries

    again, built = load_or_build_index(tmp_path / "idx", names, encoder, "tiny")
    assert not built and calls == [] and again.entries == index.entries
    _, built = load_or_build_index(tmp_path / "idx", names, encoder, "another kg")
    assert built and calls == [1]
    with pytest.raises(FileNotFoundError, match="holds no name index"):
        NameIndex.load(tmp_path / "nothing")


def test_exact_only_index_refuses_dense_linking(tmp_path: Path) -> None:
    index = NameIndex.build([NamedEntity("a", "Alpha")], None, "k")
    index.save(tmp_path)
    assert NameIndex.load(tmp_path).faiss_index is None
    with pytest.raises(ValueError, match="linking.dense: off"):
        EntityLinker(index, LinkingConfig())


def test_link_questions_records_failures_and_never_sees_answers(index: NameIndex, encoder: TextEncoder) -> None:
    questions = [Question("q1", "who directed Forrest Gump", ("Robert Zemeckis",), ("m.2",)),
                 Question("q2", "who directed Heat", ("Michael Mann",), ("m.3",)),
                 Question("q3", "what is this", ("x",), ("m.1",))]
    items, records = link_questions(questions, linker(index, encoder, dense="off"))
    assert items[0] == Question("q1", "who directed Forrest Gump", ("Robert Zemeckis",), ("m.2",))
    assert [(b.source, b.reason) for b in items[1:]] == [("q2", "link_ambiguous"), ("q3", "link_not_found")]
    assert [r["failure"] for r in records] == [None, "ambiguous", "not_found"]


def test_qa_link_samples_replace_topics_and_fail_with_reason(index: NameIndex, encoder: TextEncoder) -> None:
    from rg.data.sample import Sample
    from rg.jobs.qa_pool import link_samples

    samples = [Sample("a", "who directed Forrest Gump", (), ("given",), (), (("m.6", "d", "m.2"),)),
               Sample("b", "who directed Heat", (), ("m.3",), (), ())]
    kept, failed = link_samples(samples, linker(index, encoder, dense="off"))
    assert [(s.id, s.q_entities, s.triples) for s in kept] == [("a", ("m.2",), (("m.6", "d", "m.2"),))]
    assert [(p.id, p.failure) for p in failed] == [("b", "link_ambiguous: 'Heat' names 2 entities: m.3, m.4")]


@pytest.mark.parametrize("settings, key", [
    ({"threshold": 1.5}, "linking.threshold"),
    ({"treshold": 0.5}, "did you mean 'threshold'"),
    ({"dense": "always"}, "linking.dense"),
    ({"unnamed_pattern": "(["}, "unnamed_pattern"),
])
def test_config_errors_name_the_key(settings: dict, key: str) -> None:
    data = {"output_dir": "out", "kb": {"path": "kb.txt", "format": "metaqa"},
            "questions": [{"name": "q", "path": "q.txt", "format": "metaqa", "hops": 1}], "linking": settings}
    with pytest.raises(ConfigError, match=key.replace("(", r"\(").replace("[", r"\[")):
        validate_config(data, BuildSubgraphsConfig)


def test_linking_true_means_defaults_and_qa_needs_an_index() -> None:
    data = {"output_dir": "out", "kb": {"path": "kb.txt", "format": "metaqa"},
            "questions": [{"name": "q", "path": "q.txt", "format": "metaqa", "hops": 1}]}
    assert validate_config({**data, "linking": True}, BuildSubgraphsConfig).linking == LinkingConfig()
    assert validate_config({**data, "linking": False}, BuildSubgraphsConfig).linking is None
    qa = {"input": "x.parquet", "output_dir": "o", "retriever": {"kind": "hop_distance"}, "linking": True}
    with pytest.raises(ConfigError, match="linking.index_dir is not set"):
        validate_config(qa, QAEvaluateConfig)


KB = "Inception|directed_by|Christopher Nolan\nInception|release_year|2010\nTitanic|directed_by|James Cameron\n"


def test_build_job_links_from_the_raw_question(ray_local, tmp_path: Path) -> None:
    from rg.jobs.build_subgraphs import build_subgraphs

    (tmp_path / "kb.txt").write_text(KB)
    with gzip.open(tmp_path / "q.txt.gz", "wt") as f:
        f.write("who directed [Inception]\tChristopher Nolan\nwhat did [Kate Winslet] act in\tTitanic\n"
                "when was [Titanic] released\t1997\n")
    cfg = validate_config({
        "output_dir": str(tmp_path / "out"), "kb": {"path": str(tmp_path / "kb.txt"), "format": "metaqa"},
        "questions": [{"name": "m", "path": str(tmp_path / "q.txt.gz"), "format": "metaqa", "hops": 1}],
        "linking": {"dense": "off"}, "num_actors": 1,
    }, BuildSubgraphsConfig)
    report = build_subgraphs(cfg, progress=False)
    source = report["sources"]["m"]
    assert (source["lines"], source["built"], source["bad"]) == (3, 2, {"link_not_found": 1})
    assert report["linking"]["m"] == {"questions": 3, "linked": 2, "failures": {"not_found": 1},
                                      "same_as_dataset_topics": 2, "differs_from_dataset_topics": 0}
    records = [json.loads(line) for line in (tmp_path / "out" / "m" / "linking.jsonl").read_text().splitlines()]
    assert [r["linked"] for r in records] == [["Inception"], [], ["Titanic"]]
    assert (tmp_path / "out" / "linking-index" / "meta.json").is_file()


def test_sparql_store_gives_the_same_links(virtuoso, tmp_path: Path) -> None:
    from rg.stores.ntriples import entity_ids
    from tests.stores_virtuoso import load_graph

    kg = KnowledgeGraph.from_triples([("Heat", "directed_by", "Michael Mann"), ("Heat", "has_tags", "director"),
                                      ("Ali", "directed_by", "Michael Mann"), ("L'Été", "in_language", "French")])
    store = load_graph(virtuoso, kg, "http://rg.test/linking", tmp_path, batch_size=2)
    ids = dict(zip(kg.entity_names.tolist(), entity_ids(kg).tolist()))
    names = store_names(store, LinkingConfig().unnamed_pattern)
    assert sorted((n.entity_id, n.name) for n in names) == sorted((ids[e], e) for e in ids)
    sparql = EntityLinker(NameIndex.build(names, None, "sparql"), LinkingConfig(dense="off"))
    memory = EntityLinker(NameIndex.build(store_names(MemoryStore(kg)), None, "memory"), LinkingConfig(dense="off"))
    for question in ("who directed Heat", "what language is l'ete in", "did Michael Mann direct Ali"):
        assert sparql.link(question).entities == tuple(ids[e] for e in memory.link(question).entities)
    assert sparql.link("what language is l'ete in").entities == (ids["L'Été"],)
    paged = list(store.iter_names(page_size=2))
    assert sorted(paged) == sorted((ids[e], e) for e in ids) and len(paged) == 6


def test_qa_job_links_topics_and_records_failures(ray_local, tmp_path: Path) -> None:
    from rg.data.rog import write_rog_parquet
    from rg.jobs.evaluate_qa import evaluate_qa
    from tests.test_qa_eval import SAMPLES

    parquet = tmp_path / "samples.parquet"
    write_rog_parquet(list(SAMPLES), parquet)
    kg = KnowledgeGraph.from_triples([t for s in SAMPLES for t in s.triples])
    NameIndex.build(store_names(MemoryStore(kg)), None, "qa").save(tmp_path / "index")
    cfg = validate_config({
        "input": str(parquet), "output_dir": str(tmp_path / "out"), "retriever": {"kind": "hop_distance"},
        "evidence": {"max_length": 1}, "num_actors": 1, "actor_cpus": 0.5, "batch_size": 2,
        "linking": {"index_dir": str(tmp_path / "index"), "dense": "off"},
    }, QAEvaluateConfig)
    result = evaluate_qa(cfg, progress=False)
    rows = {r["id"]: r for r in map(json.loads, result.files.predictions.read_text().splitlines())}
    assert sorted(rows) == ["a", "b", "c", "d"]  # nothing dropped
    assert rows["d"]["failure"] == "link_not_found: no n-gram matches an entity name" and rows["d"]["hit"] == 0
    assert rows["a"]["answers"][0] == "Ann" and rows["a"]["failure"] is None


def test_yaml_off_is_dense_off(tmp_path) -> None:
    from rg.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("output_dir: out\nkb: {path: kb.txt, format: metaqa}\n"
                    "questions: [{name: q, path: q.txt, format: metaqa, hops: 1}]\nlinking: {dense: off}\n")
    assert load_config(path, BuildSubgraphsConfig).linking.dense == "off"
    with pytest.raises(ConfigError, match="linking.dense"):
        validate_config({"output_dir": "out", "kb": {"path": "kb.txt", "format": "metaqa"},
                         "questions": [{"name": "q", "path": "q.txt", "format": "metaqa", "hops": 1}],
                         "linking": {"dense": True}}, BuildSubgraphsConfig)
