"""Local pretrained models: the base-model registry and a batched local chat model."""

from rg.models.chat import ChatRequest, ChatResult, LocalChatModel, PromptTooLongError
from rg.models.registry import (
    MODELS_DIR_ENV,
    REGISTRY,
    ModelNotAvailableError,
    model_record,
    models_dir,
    resolve_model,
)

__all__ = [
    "ChatRequest",
    "ChatResult",
    "LocalChatModel",
    "MODELS_DIR_ENV",
    "ModelNotAvailableError",
    "PromptTooLongError",
    "REGISTRY",
    "model_record",
    "models_dir",
    "resolve_model",
]
