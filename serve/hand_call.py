"""One question from the Ingress to the Hand: a deadline, a bounded retry when the replica dies, clear HTTP errors.

Answering is read-only (the Hand searches the KG and asks the Brain; it writes nothing a retry
could duplicate), so a question whose Hand replica died under it (``ActorDiedError``, or
``ActorUnavailableError`` when Ray cannot tell yet) is sent again — at most ``retries`` times and
only while the request's deadline leaves time — and Serve routes the retry to a live replica, or
queues it until the replacement is up. Every other outcome is one clear HTTP error with a JSON
``detail``:

- no answer by the deadline → 504 (the pending call is cancelled);
- the Hand's queue is full or the deployment is not up (``BackPressureError``,
  ``DeploymentUnavailableError``, any other ``RayServeException``), or the replica died and no
  retry is left → 503 with ``Retry-After``;
- the Hand raised → 500 naming the exception.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Protocol

from fastapi import HTTPException
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import RayServeException


class Pending(Protocol):
    """What a ``DeploymentHandle`` call returns: awaitable and cancellable."""

    def __await__(self): ...

    def cancel(self) -> None: ...


async def _resolve(response: Awaitable[Any]) -> Any:
    return await response


async def ask_hand(call: Callable[[], Pending], *, timeout_s: float, retries: int,
                   retry_after_s: int) -> tuple[Any, int]:
    """Await ``call()`` within ``timeout_s``, calling again after a dead replica (module docstring).

    Args:
        call: Sends the question once (``lambda: hand.answer.remote(question, topics)``).
        timeout_s: The request's deadline (``request_timeout_s``), shared by all attempts.
        retries: Calls after the first one, each only after a dead replica (``hand_retries``).
        retry_after_s: ``Retry-After`` of a 503.

    Returns:
        The Hand's result and the number of calls it took.

    Raises:
        HTTPException: 504, 503 (with ``Retry-After``) or 500, with the reason as ``detail``.
    """
    deadline = time.monotonic() + timeout_s
    retry_after = {"Retry-After": str(retry_after_s)}
    for attempt in range(1, retries + 2):  # bounded: the first call and at most `retries` more
        response = call()
        try:
            return await asyncio.wait_for(_resolve(response), max(0.0, deadline - time.monotonic())), attempt
        except asyncio.TimeoutError:
            response.cancel()
            raise HTTPException(504, detail=f"no answer within {timeout_s} s (request_timeout_s)") from None
        except RayActorError as err:
            if attempt <= retries and deadline - time.monotonic() > 0:
                continue
            raise HTTPException(503, headers=retry_after,
                                detail=f"the Hand replica serving this request died ({type(err).__name__}; "
                                       f"{attempt} attempt(s), hand_retries={retries}); retry") from None
        except RayServeException as err:
            raise HTTPException(503, headers=retry_after,
                                detail=f"the Hand is overloaded or starting ({type(err).__name__}); retry") from None
        except RayTaskError as err:
            raise HTTPException(500, detail=f"the Hand failed: {type(err.cause).__name__}: {err.cause}") from None
    raise AssertionError("unreachable: the last attempt returns or raises")
