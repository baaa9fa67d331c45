"""The paraphrase generator: synthetic and MetaQA template families, exact seeded outputs."""

from __future__ import annotations

import gzip

import pytest

from rg.data.paraphrase import Family, ParaphraseConfig, TemplateBank, metaqa_bank, qtype_path, synthetic_bank
from rg.data.sample import Question
from rg.data.synthetic.vocab import DIRECTED_BY

KG = (("F1", DIRECTED_BY, "Ann"), ("F2", DIRECTED_BY, "Bob"), ("F3", DIRECTED_BY, "Ann"), ("F4", "x", "Ann"))


def test_synthetic_paraphrases_keep_entities_and_path_and_follow_the_seed():
    bank = synthetic_bank()
    family, wording = bank.match("Who directed Film X?", ["Film X"])
    assert family.name == "film_director" and family.paths == ((DIRECTED_BY,),) and wording == "Who directed {0}?"
    assert bank.paraphrases("Who directed Film X?", ["Film X"], 2, seed=0) == [
        "Which person directed the film Film X?", "Who was the director of Film X?"]
    assert bank.paraphrases("Who directed Film X?", ["Film X"], 1, seed=0) == ["Which person directed the film Film X?"]
    # a paraphrase belongs to the same family: its own paraphrases include the original wording
    assert "Who directed Film X?" in bank.paraphrases("Who was the director of Film X?", ["Film X"], 5)
    assert bank.paraphrases("Which film directed by Ann starred Bob?", ["Ann", "Bob"], 5, seed=3) == [
        "Which film by Ann had Bob in it?", "What film starring Bob did Ann direct?"]
    assert bank.paraphrases("Who is Zed?", ["Zed"], 3) == [] and bank.match("Who directed X?", ["Y"]) is None


def test_same_template_questions_walk_the_path_on_other_entities():
    bank = synthetic_bank()
    assert bank.same_template("Who was the director of F1?", ["F1"], KG, 5, seed=0) == [
        Question("film_director-0", "Who was the director of F2?", ("Bob",), ("F2",), 1, ((DIRECTED_BY,),)),
        Question("film_director-1", "Who was the director of F3?", ("Ann",), ("F3",), 1, ((DIRECTED_BY,),)),
    ]
    backward = bank.same_template("Which films did Ann direct?", ["Ann"], KG, 5)
    assert [(q.question, q.answers) for q in backward] == [("Which films did Bob direct?", ("F2",))]
    assert bank.same_template("Which films did Ann direct?", ["Ann"], KG, 5, max_answers=0) == []
    assert bank.same_template("Which film directed by Ann starred Bob?", ["Ann", "Bob"], KG, 5) == []  # two topics


def test_a_wording_in_two_families_is_refused():
    with pytest.raises(ValueError, match="belongs to families 'a' and 'b'"):
        TemplateBank([Family("a", (("r",),), ("who is {0}",)), Family("b", (("s",),), ("who is {0}",))])


def test_qtype_paths():
    assert qtype_path("movie_to_director") == ("directed_by",)
    assert qtype_path("actor_to_movie_to_director") == ("starred_actors^-1", "directed_by")
    assert qtype_path("movie_to_writer_to_movie_to_year") == ("written_by", "written_by^-1", "release_year")
    with pytest.raises(ValueError, match="no relation between 'actor' and 'director'"):
        qtype_path("actor_to_director")


def test_metaqa_bank_from_its_question_templates(tmp_path):
    lines = ["who directed [Heat]\tMichael Mann", "which person directed [Casino]\tMartin Scorsese",
             "who directed [Top Gun]\tTony Scott", "what films did [Al Pacino] act in\tHeat",
             "a line with [two] [topics]\tx"]
    types = ["movie_to_director", "movie_to_director", "movie_to_director", "actor_to_movie", "movie_to_director"]
    (tmp_path / "q.txt.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    (tmp_path / "t.txt").write_text("\n".join(types) + "\n")
    bank = metaqa_bank([(tmp_path / "q.txt.gz", tmp_path / "t.txt")])
    assert sorted(bank.families) == ["actor_to_movie", "movie_to_director"]
    assert bank.families["movie_to_director"] == Family(
        "movie_to_director", (("directed_by",),), ("who directed {0}", "which person directed {0}"))
    assert bank.paraphrases("who directed Collateral", ["Collateral"], 3) == ["which person directed Collateral"]
    kb = (("Heat", "directed_by", "Michael Mann"), ("Collateral", "directed_by", "Michael Mann"))
    assert [(q.question, q.answers) for q in bank.same_template("who directed Heat", ["Heat"], kb, 3)] == [
        ("who directed Collateral", ("Michael Mann",))]


def test_metaqa_bank_reads_shared_paths(tmp_path, monkeypatch):
    (tmp_path / "metaqa").mkdir()
    (tmp_path / "metaqa" / "q.txt").write_text("who directed [Heat]\tMichael Mann\n")
    (tmp_path / "metaqa" / "t.txt").write_text("movie_to_director\n")
    monkeypatch.setenv("RG_SHARED_DATA", str(tmp_path))
    bank = ParaphraseConfig(bank="metaqa", metaqa_files=[("@shared/metaqa/q.txt", "@shared/metaqa/t.txt")]).build()
    assert bank.families["movie_to_director"].wordings == ("who directed {0}",)


def test_metaqa_bank_on_the_real_files(shared_data):
    folder = shared_data / "metaqa"
    bank = metaqa_bank([(folder / f"qa_test_{h}hop.txt.gz", folder / f"qa_test_{h}hop_qtype.txt.gz") for h in (1, 2, 3)])
    assert len(bank.families) == 47 and sum(len(f.wordings) for f in bank.families.values()) == 503
    assert bank.families["actor_to_movie_to_director"].paths == (("starred_actors^-1", "directed_by"),)
    assert bank.paraphrases("which person directed Heat", ["Heat"], 3) == [
        "who is the director of Heat", "the director of Heat was", "who directed the movie Heat"]
