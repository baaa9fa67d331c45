"""The Serve config files under serve/configs validate before anyone runs them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from rg.config import validate_config
from rg.models.config import ChatServerConfig

CONFIGS = Path(__file__).resolve().parents[1] / "serve" / "configs"


def applications(name: str) -> list[dict]:
    data = yaml.safe_load((CONFIGS / name).read_text())
    assert (CONFIGS / name).read_text().startswith("# RAY_AUTH_MODE=disabled serve run serve/configs/")
    return data["applications"]


def test_local_server_config_args_are_a_valid_chat_server_config():
    [app] = applications("llm_local.yaml")
    assert app["import_path"] == "serve.llm_server:build_app"
    config = validate_config(app["args"], ChatServerConfig, source="llm_local.yaml")
    assert config.model_name == "smollm2-135m" and config.max_batch_size == 8


def test_bad_server_args_name_the_key():
    with pytest.raises(ValueError, match="max_batch_sise"):
        validate_config({"max_batch_sise": 4}, ChatServerConfig, source="args")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="Ray Serve LLM needs vLLM (GPU images only)")
def test_vllm_config_validates_against_ray_serve_llm():
    from ray.serve.llm import LLMConfig, LLMServingArgs

    [app] = applications("llm_vllm.yaml")
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    args = LLMServingArgs.model_validate(app["args"])
    [llm] = [LLMConfig.model_validate(c) for c in args.llm_configs]
    assert llm.model_loading_config.model_id == "smollm2-135m"
