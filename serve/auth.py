"""Bearer tokens with scopes for the endpoint (issue 59): ``ask`` (questions, the OpenAI route, the page's
calls) and ``edit`` (``POST /v1/kg/edits``).

Tokens come from the config's ``auth.tokens``, each read from an environment variable (``env``;
the way to pass a secret) or given inline (``value``; for tests). They are read in the Ingress
replica's own process, and ``build_app`` checks they resolve before any replica starts. A presented
token is hashed (SHA-256) and compared with every configured token's hash with
:func:`hmac.compare_digest`, without stopping at the first match, so the time taken says nothing
about which token or how much of it matched. No ``Authorization: Bearer`` header (or an unknown
token) → 401 with ``WWW-Authenticate: Bearer``; a known token without the route's scope → 403.

``auth: {mode: "off"}`` turns checking off, and is refused unless said explicitly: with it the
Ingress answers loopback clients only (127.0.0.0/8, ::1) and gives every other client 403, so an
endpoint bound to a public address never runs open.
"""

# no `from __future__ import annotations`: Serve pickles the route dependencies by value into the Ingress
# replica, where string annotations (`"Request"`) no longer resolve and FastAPI would read them as query fields
import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass
from typing import Literal, Mapping, Optional

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field, SecretStr, model_validator

from rg.config import Config, ConfigError

Scope = Literal["ask", "edit"]
bearer = HTTPBearer(auto_error=False, description="A token from the config's auth.tokens.")


class TokenSpec(Config):
    """One bearer token and what it may do."""

    name: str = Field(min_length=1, description="Who holds the token (for logs; never the token itself).")
    scopes: tuple[Scope, ...] = Field(min_length=1, description="`ask` (questions), `edit` (KG edits), or both.")
    env: Optional[str] = Field(None, description="Environment variable holding the token, read in the Ingress "
                                                 "replica (on a cluster: --runtime-env-json env_vars).")
    value: Optional[SecretStr] = Field(None, description="The token itself (tests; prefer `env` for real secrets).")

    @model_validator(mode="after")
    def _one_source(self) -> "TokenSpec":
        if (self.env is None) == (self.value is None):
            raise ValueError(f"token {self.name!r}: set exactly one of env, value. Fix: env: RG_TOKEN_{self.name.upper()}")
        return self


class AuthConfig(Config):
    """Who may call the endpoint (module docstring)."""

    mode: Literal["tokens", "off"] = Field("tokens", description="`tokens`: every data route needs a bearer token; "
                                                                 "`off`: no check, loopback clients only.")
    tokens: tuple[TokenSpec, ...] = Field((), description="The accepted tokens and their scopes.")
    min_token_chars: int = Field(16, ge=8, le=4096, description="Shortest token accepted from the config.")

    @model_validator(mode="after")
    def _explicit(self) -> "AuthConfig":
        if self.mode == "tokens" and not self.tokens:
            raise ValueError("auth.mode is 'tokens' but auth.tokens is empty: nobody could call the endpoint. Fix: add "
                             "auth.tokens ({name, scopes: [ask, edit], env: RG_TOKEN}), or set auth.mode: off to run "
                             "without tokens for loopback clients only")
        if self.mode == "off" and self.tokens:
            raise ValueError("auth.mode is 'off' but auth.tokens are set; they would be ignored. Fix: remove "
                             "auth.tokens or set auth.mode: tokens")
        names = [t.name for t in self.tokens]
        if len(set(names)) != len(names):
            raise ValueError(f"auth.tokens repeat a name ({names}). Fix: give each token its own name")
        return self


@dataclass(frozen=True)
class _Known:
    name: str
    digest: bytes
    scopes: frozenset[str]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def is_loopback(host: str | None) -> bool:
    """Whether a client address is loopback (an address that does not parse is not)."""
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class Authenticator:
    """Checks a request's bearer token against the configured ones (module docstring).

    Args:
        config: The ``auth`` section.
        environ: Where ``env`` tokens are read (default: this process's environment).

    Raises:
        ConfigError: for a token whose variable is unset or shorter than ``min_token_chars``, or two equal tokens.
    """

    def __init__(self, config: AuthConfig, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        self.config = config
        known = []
        for spec in config.tokens:
            token = environ.get(spec.env, "") if spec.env is not None else spec.value.get_secret_value()  # type: ignore[union-attr]
            where = f"the environment variable {spec.env}" if spec.env else "its value"
            if not token:
                raise ConfigError(f"auth.tokens {spec.name!r}: {where} is not set (in this process). Fix: export it "
                                  "where `serve run` starts, or pass it with --runtime-env-json on a cluster")
            if len(token) < config.min_token_chars:
                raise ConfigError(f"auth.tokens {spec.name!r}: {where} has {len(token)} characters; at least "
                                  f"{config.min_token_chars} are needed (auth.min_token_chars). Fix: e.g. "
                                  "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
            known.append(_Known(spec.name, _digest(token), frozenset(spec.scopes)))
        if len({k.digest for k in known}) != len(known):
            raise ConfigError("auth.tokens: two tokens are equal, so their scopes could not be told apart. Fix: give "
                              "each its own token")
        self.known = tuple(known)

    def check(self, credentials: HTTPAuthorizationCredentials | None, scope: Scope, client: str | None) -> str:
        """The caller's token name (``loopback`` with auth off).

        Raises:
            HTTPException: 401 without a (known) bearer token, 403 with one that lacks ``scope`` or, with auth
                off, for a client that is not loopback.
        """
        if self.config.mode == "off":
            if not is_loopback(client):
                raise HTTPException(403, detail=f"auth is off on this endpoint (auth.mode: off), so it answers "
                                                f"loopback clients only; {client} is not one. Fix: call from the "
                                                "machine itself, or configure auth.tokens")
            return "loopback"
        if credentials is None or not credentials.credentials:
            raise HTTPException(401, detail="this route needs an `Authorization: Bearer <token>` header",
                                headers={"WWW-Authenticate": "Bearer"})
        presented = _digest(credentials.credentials)
        match: _Known | None = None
        for known in self.known:  # every token compared, in constant time each: no early exit
            if hmac.compare_digest(presented, known.digest):
                match = known
        if match is None:
            raise HTTPException(401, detail="the bearer token is not one this endpoint accepts",
                                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        if scope not in match.scopes:
            raise HTTPException(403, detail=f"the token {match.name!r} lacks the {scope!r} scope this route needs "
                                            f"(it has {sorted(match.scopes)})")
        return match.name


def require(scope: Scope):
    """A FastAPI dependency: the route needs a token with ``scope`` (checked by ``request.app.state.auth``)."""
    async def dependency(request: Request,
                         credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
        auth: Authenticator = request.app.state.auth
        return auth.check(credentials, scope, request.client.host if request.client else None)
    dependency.__name__ = f"require_{scope}"
    return dependency
