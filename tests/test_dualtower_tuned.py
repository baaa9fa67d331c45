"""``hand.kind: tuned``: the Hand reads with the LoRA-tuned local reader the verified walks first and then its
own retrieval over the raw subgraph; config rules name the key and the fix; the pipeline wires the read and
train stages' exports into a dual-tower QA run."""

from __future__ import annotations

import numpy as np
import pytest

from rg.config import load_config
from rg.evidence import EvidenceConfig
from rg.graph import KnowledgeGraph
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.reading import hand_evidence
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, schema

CASINO = [t for t in TRIPLES if t[0] == "Casino"]


def test_verified_triples_come_first_then_the_retrievers_best():
    scores = np.array([5.0 if t == ("Casino", "starred_actors", "Robert De Niro") else 0.1 for t in CASINO])
    evidence = hand_evidence(CASINO, scores, ["Casino"], [("Casino", "directed_by", "Martin Scorsese")], 2,
                             EvidenceConfig(max_length=1))
    assert [c.render() for c in evidence.chains()] == ["Casino → [directed_by] → Martin Scorsese",
                                                       "Casino → [starred_actors] → Robert De Niro"]
    beside = hand_evidence(CASINO, scores, ["Casino"], [("Casino", "directed_by", "Martin Scorsese")], 1,
                           EvidenceConfig(max_length=1), first=False)  # the retriever's order; verified kept beside
    assert [c.render() for c in beside.chains()] == ["Casino → [starred_actors] → Robert De Niro",
                                                     "Casino → [directed_by] → Martin Scorsese"]
    alone = hand_evidence(CASINO, None, ["Casino"], [("Casino", "directed_by", "Martin Scorsese")], 100,
                          EvidenceConfig(max_length=1))
    assert [c.render() for c in alone.chains()] == ["Casino → [directed_by] → Martin Scorsese"]


def test_hand_rules_name_the_key_and_the_fix():
    with pytest.raises(ValueError, match=r"hand.kind is 'tuned' but hand.reader is not set. Fix: .*jobs.pipeline"):
        DualTowerConfig(hand={"kind": "tuned"})
    with pytest.raises(ValueError, match=r"hand.reader or hand.retriever is set but hand.kind is 'local'. Fix"):
        DualTowerConfig(hand={"reader": "r"})
    assert DualTowerConfig(hand={"kind": "tuned", "reader": "r", "retriever": "m"}, similarity="lexical").needs_encoder


def test_the_pipeline_gives_a_tuned_hand_the_read_and_train_stages_exports(tmp_path):
    from rg.pipeline import PipelineConfig

    cfg = load_config("configs/demo.yaml", PipelineConfig,
                      [f"output_dir={tmp_path}", "qa.dualtower.dualtower.hand={kind: tuned}"])
    hand = cfg.qa["dualtower"].dualtower.hand
    assert (hand.kind, hand.reader, hand.retriever) == ("tuned", str(tmp_path / "read" / "reader"),
                                                        str(tmp_path / "train" / "retriever"))


def test_a_tuned_hand_answers_from_the_verified_walks(tmp_path):
    import torch

    from rg.models import REGISTRY, ModelNotAvailableError
    from rg.reasoning.tuned_reader import TunedReaderSettings
    from rg.training.reader_loop import ReaderLora, lora_reader_model
    from rg.jobs.train_reader import save_reader
    from tests.test_dualtower_wire import brain
    from tests.scripted_server import Respond, Script, ScriptedServer

    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    torch.manual_seed(0)
    model, _ = lora_reader_model(TunedReaderSettings(), ReaderLora())  # an untrained adapter: any shown end
    folder = save_reader(model, TunedReaderSettings(evidence=EvidenceConfig(max_length=2)), tmp_path / "reader")
    with ScriptedServer(Script.always(Respond(brain))) as server:
        config = DualTowerConfig(
            privacy={"mode": "utility"}, similarity="lexical", hand={"kind": "tuned", "reader": str(folder)},
            brain={"kind": "llm", "llm": {"base_url": server.base_url, "model": "scripted", "side": "brain"}})
        run = build_controller(config, schema(), store=MemoryStore(KnowledgeGraph.from_triples(TRIPLES)))
        result = run.answer("who directed Casino", ["Casino"])
    # without a retriever the reader is shown the verified walks only, and may write only their ends
    verified_ends = {line.rsplit(" → ", 1)[1] for line in result.evidence}
    assert result.answers and set(result.answers) <= verified_ends
    assert run.reader.name == "tuned:smollm2-135m+lora"
