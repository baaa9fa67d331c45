"""A GGUF file's weights as a transformers state dict, read in one pass over a memory map.

transformers loads a llama GGUF checkpoint through its legacy reader, which parses the file's
metadata field by field (the 49,152-token vocabulary and its merges as Python objects) and builds
its tensor-name map once per submodule. On a 2-core AMD EPYC with AVX2 only, those two were 24 s
of the 40 s SmolLM2 conversion. Here the file's tensor table comes from transformers' memory-mapped
header reader, each tensor is dequantised by the ``gguf`` package (llama.cpp's), named by
transformers' own GGUF-to-HF map built once at the top level, and passed through transformers'
tensor processor for the architecture (for llama, the q/k rotary permutation undone). The result
equals what ``from_pretrained(..., gguf_file=...)`` loads, tensor for tensor (tests/test_models.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


class _TopLevel:
    """The model as transformers' weights-map builder reads it, without submodules to recurse into.

    The top-level state dict names every tensor already; each recursion level would rebuild the
    whole tensor-name map only to drop the names the top level mapped.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.config = model.config
        self._state = model.state_dict()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state

    def named_children(self) -> list:
        return []


def gguf_state_dict(path: str | Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The file's tensors in fp32 under ``model``'s parameter names.

    Args:
        path: The GGUF file.
        model: A model of the file's architecture and sizes (e.g. built from the file's config);
            only its config and parameter names are read.

    Raises:
        ValueError: when the file's tensors leave a parameter of ``model`` unfilled (and not tied
            to one that is filled), or hold one ``model`` has no place for.
    """
    from gguf import GGMLQuantizationType, dequantize
    from transformers.integrations.gguf.reader import GgufHeader
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    header = GgufHeader.from_file(str(path))
    config = model.config.to_dict()
    processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=config)
    names = get_gguf_hf_weights_map(_TopLevel(model), processor)
    blob = np.memmap(path, dtype=np.uint8, mode="r")
    parsed: dict = {"config": config, "tensors": {}}
    state: dict[str, torch.Tensor] = {}
    for info in header.tensors:
        start = header.data_start + info.offset
        raw = blob[start: start + info.nbytes].reshape(*info.shape[:-1], -1)  # one row of blocks per row
        weights = dequantize(raw, GGMLQuantizationType(info.ggml_type)).reshape(info.shape)
        result = processor.process(weights=weights, name=info.name, tensor_key_mapping=names,
                                   parsed_parameters=parsed)
        if result.name in names:
            state[names[result.name]] = torch.from_numpy(np.array(result.weights, dtype=np.float32))
    _check_complete(model, state, Path(path).name)
    return state


def _check_complete(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    expected = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
    unexpected = sorted(set(state) - set(expected))
    filled = {expected[name].data_ptr() for name in state if name in expected}
    # a tied parameter (SmolLM2's lm_head is its embedding) is filled through the one it shares
    missing = sorted(name for name, tensor in model.named_parameters(remove_duplicate=False)
                     if name not in state and tensor.data_ptr() not in filled)
    if unexpected or missing:
        raise ValueError(f"{source}: tensors without a parameter {unexpected[:5]}, parameters without a tensor "
                         f"{missing[:5]}. Fix: the file's architecture does not match the model built from its config")
