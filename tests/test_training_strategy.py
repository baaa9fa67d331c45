"""train.strategy: ddp | deepspeed for the planner and the reader trainers (rg.training.strategy).

The engine-config builder runs without deepspeed: the shipped ZeRO-2 JSON's "auto" entries are
filled from the typed config with exact numbers, and numbers that contradict it are refused with
one line naming the field. Config loading refuses deepspeed without a GPU or the package. One test
builds a real DeepSpeed engine over a tiny planner and takes a step; it skips without deepspeed
or a CUDA device (this machine has neither)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rg.config import ConfigError, validate_config
from rg.jobs.train_planner import PlannerTrainConfig
from rg.training.reader_loop import WEIGHT_DECAY
from rg.jobs.train_reader import ReaderTrainConfig
from rg.training.strategy import DeepSpeedSettings, config_path, engine_config, load_engine_config

SHIPPED = Path(__file__).resolve().parents[1] / "configs" / "deepspeed_zero2.json"
ZERO2 = {"stage": 2, "allgather_partitions": True, "allgather_bucket_size": 200000000, "overlap_comm": True,
         "reduce_scatter": True, "reduce_bucket_size": 200000000, "contiguous_gradients": True}


def shipped() -> dict:
    return json.loads(SHIPPED.read_text())


def build(base: dict, **overrides) -> dict:
    args = {"source": "zero2.json", "workers": 2, "micro_batch": 32, "accumulation": 1, "lr": 2e-3,
            "weight_decay": 0.0, "grad_clip": 1.0, "precision": "bf16", **overrides}
    return engine_config(base, **args)


def test_shipped_json_is_filled_with_exact_numbers():
    assert build(shipped()) == {
        "bf16": {"enabled": True},
        "fp16": {"enabled": False},
        "zero_optimization": ZERO2,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 32,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.0}},
    }
    four = build(shipped(), workers=4, micro_batch=8, accumulation=4, lr=1e-4, weight_decay=0.01, grad_clip=None,
                 precision="fp16")
    assert (four["train_batch_size"], four["train_micro_batch_size_per_gpu"], four["gradient_accumulation_steps"]) == (
        128, 8, 4)
    assert four["gradient_clipping"] == 0.0  # grad_clip None: DeepSpeed's "no clipping"
    assert four["bf16"] == {"enabled": False} and four["fp16"] == {"enabled": True}
    assert four["optimizer"] == {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}}
    fp32 = build(shipped(), precision="fp32")
    assert fp32["bf16"] == {"enabled": False} and fp32["fp16"] == {"enabled": False}
    assert "_comment" not in fp32 and shipped()["train_batch_size"] == "auto"  # the input is not modified


def test_matching_numbers_in_the_json_are_kept():
    base = {**shipped(), "train_batch_size": 64, "train_micro_batch_size_per_gpu": 32, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "betas": [0.9, 0.95]}}, "bf16": {"enabled": True}}
    config = build(base)
    assert config["train_batch_size"] == 64
    assert config["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-3, "betas": [0.9, 0.95], "weight_decay": 0.0}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"train_micro_batch_size_per_gpu": 16},
         r"`train_micro_batch_size_per_gpu` is 16 but train.batch_size gives 32\. Fix: set"),
        ({"train_batch_size": 100}, r"`train_batch_size` is 100 but num_workers × train.batch_size × "
                                    r"train.deepspeed.gradient_accumulation_steps gives 64"),
        ({"gradient_accumulation_steps": 2}, r"`gradient_accumulation_steps` is 2 but "
                                             r"train.deepspeed.gradient_accumulation_steps gives 1"),
        ({"gradient_clipping": 0.5}, r"`gradient_clipping` is 0.5 but train.grad_clip gives 1.0"),
        ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}, r"`lr` is 0.0001 but train.lr gives 0.002"),
        ({"fp16": {"enabled": True}}, r"`fp16.enabled` is True but train.deepspeed.precision is 'bf16'"),
        ({"scheduler": {"type": "WarmupLR"}}, r"remove `scheduler`"),
        ({"train_batch_size": True}, r"`train_batch_size` is True but"),
    ],
)
def test_contradictions_are_refused_in_one_line(change, message):
    with pytest.raises(ValueError, match=message) as err:
        build({**shipped(), **change})
    assert "\n" not in str(err.value) and str(err.value).startswith("zero2.json")


def test_default_settings_read_the_shipped_file_from_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the project root: the relative default resolves in the rg checkout
    assert config_path(DeepSpeedSettings().config) == SHIPPED
    config = load_engine_config(DeepSpeedSettings(gradient_accumulation_steps=3), workers=2, micro_batch=4, lr=1e-3,
                                weight_decay=WEIGHT_DECAY, grad_clip=1.0)
    assert (config["train_batch_size"], config["gradient_accumulation_steps"]) == (24, 3)
    with pytest.raises(FileNotFoundError, match="`train.deepspeed.config` file 'nope.json' does not exist"):
        config_path("nope.json")


def planner_job(**extra) -> dict:
    return {"input": "x", "run_name": "r", "output_dir": "o", **extra}


def reader_job(**extra) -> dict:
    return {"input": "x", "run_name": "r", "output_dir": "o", "retriever": {"kind": "cosine"}, **extra}


@pytest.mark.parametrize(("model", "job"), [(PlannerTrainConfig, planner_job), (ReaderTrainConfig, reader_job)])
def test_config_load_refuses_deepspeed_where_it_cannot_run(model, job, monkeypatch, tmp_path):
    assert validate_config(job(), model).train.strategy == "ddp"
    with pytest.raises(ConfigError, match=r"train.strategy: deepspeed needs `use_gpu: true`.*Fix: set use_gpu: true"):
        validate_config(job(train={"strategy": "deepspeed"}), model)
    monkeypatch.setattr("rg.training.strategy.deepspeed_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"needs the deepspeed package.*Fix: pip install -e '\.\[deepspeed\]'"):
        validate_config(job(use_gpu=True, train={"strategy": "deepspeed"}), model)
    monkeypatch.setattr("rg.training.strategy.deepspeed_installed", lambda: True)
    ok = validate_config(job(use_gpu=True, num_workers=2, train={"strategy": "deepspeed", "batch_size": 4}), model)
    assert ok.train.deepspeed.config == "configs/deepspeed_zero2.json"
    bad = tmp_path / "ds.json"
    bad.write_text(json.dumps({**shipped(), "train_micro_batch_size_per_gpu": 8}))
    with pytest.raises(ConfigError, match=r"`train_micro_batch_size_per_gpu` is 8 but train.batch_size gives 4"):
        validate_config(job(use_gpu=True, train={"strategy": "deepspeed", "batch_size": 4,
                                                 "deepspeed": {"config": str(bad)}}), model)
    with pytest.raises(ConfigError, match=r"train.strategy.*'ddp' or 'deepspeed'"):
        validate_config(job(train={"strategy": "fsdp"}), model)


def test_deepspeed_engine_trains_the_planner_adapter(tmp_path, monkeypatch):
    """A real engine (ZeRO-2 from the shipped JSON, one rank): one step changes the LoRA tensors only."""
    pytest.importorskip("deepspeed", reason="deepspeed is a GPU-node extra: pip install -e '.[deepspeed]'")
    if not torch.cuda.is_available():
        pytest.skip("the DeepSpeed engine needs a CUDA device (none here)")
    import torch.distributed as dist

    from rg.retrievers.planner import PlannerConfig, PlannerModel
    from rg.training.planner_loop import example_batches, train_epoch
    from rg.training.strategy import deepspeed_engine

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29517")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        config = PlannerConfig(tiny={"layers": 1, "hidden": 16, "heads": 2, "max_positions": 48}, max_prompt_tokens=16)
        planner = PlannerModel.build(config, ["who directed x", "what did x write"], ["directed_by", "written_by"])
        examples = planner.examples([("q1", "who directed x", ("directed_by",)), ("q2", "what did x write", ("written_by",))])
        before = planner.trainable_state()
        frozen = {n: p.detach().clone() for n, p in planner.named_parameters() if not p.requires_grad}
        engine_cfg = load_engine_config(DeepSpeedSettings(precision="fp32"), workers=1, micro_batch=2, lr=1e-2,
                                        weight_decay=0.0, grad_clip=1.0)
        engine = deepspeed_engine(planner, [p for p in planner.parameters() if p.requires_grad], engine_cfg)
        assert engine.module is planner and engine.train_batch_size() == 2
        loss = train_epoch(engine, example_batches(examples, 2, planner.vocab.pad), None, engine=engine)
        assert loss > 0
        after = planner.trainable_state()
        assert any(not torch.equal(before[n], after[n].cpu()) for n in before)
        assert all(torch.equal(v.cpu(), dict(planner.named_parameters())[n].detach().cpu()) for n, v in frozen.items())
        saved = planner.save(tmp_path / "planner")
        assert (saved / "adapter" / "adapter_config.json").is_file()
    finally:
        dist.destroy_process_group()
