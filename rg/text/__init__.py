"""Sentence encoders (offline default model) and a shared on-disk embedding cache."""

from rg.text.cache import CACHE_FILENAME, CacheCounters, EmbeddingCache, text_key
from rg.text.encoder import (
    DEFAULT_MODEL,
    DEFAULT_MODEL_PACKAGE,
    EncoderConfig,
    EncoderLoadError,
    TextEncoder,
    default_model_path,
)

__all__ = [
    "CACHE_FILENAME",
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_PACKAGE",
    "CacheCounters",
    "EmbeddingCache",
    "EncoderConfig",
    "EncoderLoadError",
    "TextEncoder",
    "default_model_path",
    "text_key",
]
