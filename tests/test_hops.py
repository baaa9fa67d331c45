"""The Hand's depth predictor (rg.reasoning.hops): k nearest training templates vote; it decides how deep the
tuned Hand cuts the subgraph it reads; the read stage fits it on the training side only."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rg.evidence import EvidenceConfig
from rg.reasoning.hops import HopPredictor

WORDS = ("who", "directed", "starred", "in", "films", "the", "what", "year", "were", "released", "actors", "te_1")


class BagOfWords:
    """Word counts over a fixed vocabulary: similarities a reader can work out by hand."""

    model_id = "bag-of-words-test"

    def encode(self, texts):
        rows = np.zeros((len(texts), len(WORDS)), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                if word in WORDS:
                    rows[i, WORDS.index(word)] += 1
        return rows


TRAIN = [
    ("who directed TE_1", 1),
    ("who starred in TE_1", 1),
    ("what year were the films released that TE_1 directed", 2),
    ("who starred in the films TE_1 directed", 2),
    ("who directed the films the actors of TE_1 starred in", 3),
]


def fitted(k: int = 1) -> HopPredictor:
    return HopPredictor.fit([t for t, _ in TRAIN], [h for _, h in TRAIN], BagOfWords(), k=k)


def test_the_nearest_templates_decide_the_depth():
    predictor = fitted(k=1)
    assert predictor.predict(["Who directed TE_1?", "the films TE_1 directed: what year were they released",
                              "who directed the films that the actors of TE_1 starred in"], BagOfWords()) == [1, 2, 3]
    assert predictor.predict([], BagOfWords()) == []


def test_a_tie_goes_to_the_nearest_tied_depth():
    # k = 2: "who directed TE_1" (1 hop) is nearest, "who directed the films ... starred in" (3 hops) next:
    # one vote each, and the nearer one wins
    assert fitted(k=2).predict(["who directed TE_1 films actors"], BagOfWords()) == [1]
    # k = 5 over every template: two votes for 1 hop and two for 2 hops; "who starred in TE_1" (1 hop) is nearest
    assert fitted(k=5).predict(["who starred in TE_1"], BagOfWords()) == [1]


def test_a_saved_predictor_reads_back_and_refuses_another_encoder(tmp_path):
    predictor = fitted(k=3)
    predictor.save(tmp_path / "hops")
    assert HopPredictor.exists(tmp_path / "hops") and not HopPredictor.exists(tmp_path)
    loaded = HopPredictor.load(tmp_path / "hops")
    questions = [t for t, _ in TRAIN]
    assert loaded.predict(questions, BagOfWords()) == predictor.predict(questions, BagOfWords())
    assert (loaded.k, loaded.encoder_id) == (3, "bag-of-words-test")

    class Other(BagOfWords):
        model_id = "another-encoder"

    with pytest.raises(ValueError, match="fitted with encoder 'bag-of-words-test', not 'another-encoder'"):
        loaded.predict(["who directed TE_1"], Other())


def test_bad_training_input_is_named():
    with pytest.raises(ValueError, match="no training questions with a known depth"):
        HopPredictor.fit([], [], BagOfWords())
    with pytest.raises(ValueError, match="2 templates for 1 depths"):
        HopPredictor.fit(["a", "b"], [1], BagOfWords())
    with pytest.raises(ValueError, match="depths must be >= 1, got 0"):
        HopPredictor.fit(["a"], [0], BagOfWords())
    with pytest.raises(ValueError, match="k must be >= 1"):
        HopPredictor.fit(["a"], [1], BagOfWords(), k=0)


class Uniform:
    """A retriever that scores every triple 1 (the test is about which triples it is given)."""

    def score(self, samples):
        return [np.ones(len(s.triples)) for s in samples]


def test_the_tuned_hand_cuts_its_subgraph_at_the_predicted_depth(tmp_path):
    import torch

    from rg.models import REGISTRY, ModelNotAvailableError
    from rg.reasoning.dualtower import DualTowerConfig
    from rg.reasoning.dualtower.reading import TunedHand
    from rg.reasoning.hops import FOLDER
    from rg.reasoning.tuned_reader import TunedReaderSettings
    from rg.training.reader_loop import ReaderLora, lora_reader_model
    from rg.training.reader_ray import save_reader
    from tests.dualtower_world import TRIPLES

    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    torch.manual_seed(0)
    model, _ = lora_reader_model(TunedReaderSettings(), ReaderLora())
    folder = save_reader(model, TunedReaderSettings(evidence=EvidenceConfig(max_length=3)), tmp_path / "reader")
    config = DualTowerConfig(similarity="lexical", hand={"kind": "tuned", "reader": str(folder)})
    without = TunedHand(config, encoder=BagOfWords())
    fitted(k=1).save(folder / FOLDER)
    hand = TunedHand(config, encoder=BagOfWords())
    for each in (hand, without):  # every triple of the cut scored alike: the evidence shows the whole cut
        each.scorer = Uniform()

    def reached(evidence) -> set[str]:
        """Every entity written on the evidence's lines."""
        parts = [p for c in evidence.chains() for p in c.render().split(" → ") if not p.startswith("[")]
        return {name.strip() for p in parts for name in p.strip("{}").split(" | ")}

    one = hand.evidence("who directed Casino", TRIPLES, ["Casino"], (), template="who directed TE_1")
    assert {c.render() for c in one.chains()} == {"Casino → [directed_by] → Martin Scorsese",
                                                  "Casino → [starred_actors] → Robert De Niro",
                                                  "Casino → [written_by] → Nicholas Pileggi",
                                                  "Casino → [release_year] → 1995"}
    two = hand.evidence("who starred in the films Casino's director directed", TRIPLES, ["Casino"], (),
                        template="who starred in the films TE_1 directed")
    assert "The Irishman" in reached(two) and "Heat" in reached(two)  # Scorsese's and 1995's films, 2 hops out
    # the predictor's depth replaces the one the controller passes; without a predictor, that one is used
    assert {c.render() for c in hand.evidence("who directed Casino", TRIPLES, ["Casino"], (), hops=3,
                                              template="who directed TE_1").chains()} == \
        {c.render() for c in one.chains()}
    assert reached(without.evidence("who directed Casino", TRIPLES, ["Casino"], (), hops=1,
                                    template="who directed TE_1")) == reached(one)
