"""rg.models.gguf_weights against transformers' own GGUF loading, tensor for tensor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rg.models.gguf_weights import gguf_state_dict
from rg.models.registry import REGISTRY
from rg.models import ModelNotAvailableError

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS, VOCAB = 64, 128, 4, 2, 2, 32


def tiny_llama_gguf(path: Path, *, tied: bool) -> Path:
    """A 2-layer llama in GGUF, its matrices Q4_1 and Q8_0 blocks, its norms F32 (random values)."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    writer = GGUFWriter(str(path), "llama")
    writer.add_vocab_size(VOCAB)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)

    def matrix(name: str, rows: int, cols: int, qtype=GGMLQuantizationType.Q4_1) -> None:
        values = rng.standard_normal((rows, cols)).astype(np.float32)
        writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)

    def vector(name: str, size: int) -> None:
        writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(size)).astype(np.float32))

    kv = HIDDEN // HEADS * KV_HEADS
    matrix("token_embd.weight", VOCAB, HIDDEN, GGMLQuantizationType.Q8_0)
    for block in range(LAYERS):
        vector(f"blk.{block}.attn_norm.weight", HIDDEN)
        matrix(f"blk.{block}.attn_q.weight", HIDDEN, HIDDEN)
        matrix(f"blk.{block}.attn_k.weight", kv, HIDDEN)
        matrix(f"blk.{block}.attn_v.weight", kv, HIDDEN)
        matrix(f"blk.{block}.attn_output.weight", HIDDEN, HIDDEN)
        vector(f"blk.{block}.ffn_norm.weight", HIDDEN)
        matrix(f"blk.{block}.ffn_gate.weight", FFN, HIDDEN)
        matrix(f"blk.{block}.ffn_up.weight", FFN, HIDDEN)
        matrix(f"blk.{block}.ffn_down.weight", HIDDEN, FFN)
    vector("output_norm.weight", HIDDEN)
    if not tied:
        matrix("output.weight", VOCAB, HIDDEN, GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def transformers_load(path: Path):
    """The model ``from_pretrained(..., gguf_file=...)`` builds (transformers' legacy llama reader)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)


def same_weights(path: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    reference = transformers_load(path)
    settings = reference.config.to_dict()
    settings.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**settings))
    ours = gguf_state_dict(path, model)
    model.load_state_dict(ours, strict=False)
    expected = reference.state_dict()
    assert set(model.state_dict()) == set(expected)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


@pytest.mark.parametrize("tied", [True, False])
def test_tiny_llama_loads_as_transformers_loads_it(tmp_path: Path, tied: bool) -> None:
    same_weights(tiny_llama_gguf(tmp_path / "tiny.gguf", tied=tied))


def test_a_file_of_another_shape_is_refused_naming_the_tensors(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tiny_llama_gguf(tmp_path / "tiny.gguf", tied=False)
    three_layers = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                                                num_hidden_layers=3, num_attention_heads=HEADS,
                                                num_key_value_heads=KV_HEADS, tie_word_embeddings=False))
    with pytest.raises(ValueError, match=r"parameters without a tensor \['model\.layers\.2\..*Fix: the file's"):
        gguf_state_dict(path, three_layers)


@pytest.mark.slow  # transformers' legacy reader takes 30-50 s on this file on 2 cores
def test_smollm2_loads_as_transformers_loads_it(tmp_path: Path) -> None:
    try:
        source = REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    same_weights(source)
    from transformers import AutoTokenizer

    from rg.models.registry import _convert

    chosen = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    _convert(REGISTRY["smollm2-135m"], source, tmp_path / "smollm2")
    ours = AutoTokenizer.from_pretrained(str(tmp_path / "smollm2"), local_files_only=True)
    assert type(chosen).__name__ == "TokenizersBackend" == type(ours).__name__
    assert ours.get_vocab() == chosen.get_vocab() and ours.chat_template == chosen.chat_template
    text = "Which films did Nicholas Pileggi write? Answer: Casino"
    assert ours(text)["input_ids"] == chosen(text)["input_ids"]
