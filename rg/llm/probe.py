"""A preflight probe of an LLM endpoint, run on the driver before any Ray work.

A job whose endpoint never answers should cost nothing but the probe: :func:`probe_endpoint`
sends ``GET <base_url>/models`` (no prompt, no tokens, nothing for an egress guard to check) with
the endpoint's own bounded retries (``max_retries``, full-jitter backoff as
:class:`rg.llm.client.OpenAICompatibleClient`) and raises :class:`EndpointDownError` naming the
endpoint, the config key and the reason when no attempt gets an answer. Connection errors,
timeouts, 429 and 5xx are retried; 401/403 fail at once (the key is refused); any other answer,
a 404 from a server that does not list its models included, shows the server is up. An endpoint
that dies later is caught per batch by the jobs themselves (``rg.jobs.refine.EndpointWatch``)::

    probe_endpoint(cfg.llm.llm, key="llm.llm")   # before init_ray
"""

from __future__ import annotations

import random
import time

from rg.llm.client import RETRYABLE, _classify_status
from rg.llm.config import LLMConfig

PROBE_PATH = "/models"
"""Path the probe requests under ``base_url`` (``GET /v1/models`` for a ``.../v1`` root)."""


class EndpointDownError(RuntimeError):
    """The LLM endpoint did not answer (the preflight probe, or a job's first batch); the message names it."""


def probe_endpoint(config: LLMConfig, *, key: str, rng: random.Random | None = None) -> int:
    """Check that ``config``'s endpoint answers, with its bounded retries; return the attempts made.

    Args:
        config: The endpoint and its calling policy (``timeout_s``, ``max_retries``, backoff).
        key: The config key of the endpoint section, named in the error (e.g. ``llm.llm``).
        rng: Source of backoff jitter.

    Raises:
        EndpointDownError: when every attempt failed (connection, timeout, 429, 5xx) or the key
            was refused (401, 403).
        MissingAPIKeyError: when a non-loopback endpoint has no key.
    """
    import openai  # only where an endpoint is probed (rg.llm.client says why)

    rng = rng if rng is not None else random.Random()
    url = f"{config.base_url}{PROBE_PATH}"
    reason, attempts = "", 0
    with openai.OpenAI(api_key=config.resolve_api_key(), base_url=config.base_url, timeout=config.timeout_s,
                       max_retries=0) as sdk:
        for attempts in range(1, config.max_retries + 2):
            if attempts > 1:
                time.sleep(rng.uniform(0.0, min(config.max_backoff_s, config.backoff_s * 2.0 ** (attempts - 2))))
            try:
                sdk.get(PROBE_PATH, cast_to=object)
                return attempts
            except openai.APITimeoutError:
                reason = f"timeout: no reply within timeout_s={config.timeout_s}"
            except openai.APIConnectionError as err:
                reason = f"connection: {err.__cause__ or err}"
            except openai.APIStatusError as err:
                failure = _classify_status(err)
                if err.status_code in (401, 403):
                    raise EndpointDownError(
                        f"LLM endpoint {config.base_url} refused the API key on GET {url} (HTTP {err.status_code}). "
                        f"Fix: set a valid key in ${config.api_key_env} (`{key}.api_key_env`)"
                    ) from None
                if failure.reason not in RETRYABLE:
                    return attempts  # the server answered (e.g. 404: it does not list its models)
                reason = f"{failure.reason}: {failure.message}"
    raise EndpointDownError(
        f"LLM endpoint {config.base_url} (model {config.model}) did not answer the preflight probe GET {url} "
        f"in {attempts} attempts ({reason}); no question was sent. "
        f"Fix: check that the server is up and `{key}.base_url`, then rerun the same command"
    )


def probe_endpoints(endpoints: dict[str, LLMConfig | None]) -> None:
    """:func:`probe_endpoint` for each configured endpoint, keyed by its config key (None: not used)."""
    for key, config in endpoints.items():
        if config is not None:
            probe_endpoint(config, key=key)
