"""Bearer tokens with scopes (serve/auth.py): 401 without a (known) token, 403 with the wrong scope, every data
route of the endpoint guarded, tokens from the environment, auth off only when said and for loopback clients."""

from __future__ import annotations

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from rg.config import ConfigError, validate_config
from serve.auth import AuthConfig, Authenticator, is_loopback, require

ASK, EDIT, BOTH = "ask-token-0123456789abcdef", "edit-token-0123456789abcdef", "both-token-0123456789abcdef"


def app_with(auth: AuthConfig, environ=None) -> FastAPI:
    app = FastAPI()
    app.state.auth = Authenticator(auth, environ)

    @app.post("/v1/answer", dependencies=[Depends(require("ask"))])
    async def answer() -> dict:
        return {"ok": True}

    @app.post("/v1/kg/edits")
    async def edits(who: str = Depends(require("edit"))) -> dict:
        return {"who": who}

    return app


def tokens() -> AuthConfig:
    return AuthConfig.model_validate({"tokens": [
        {"name": "reader", "scopes": ["ask"], "value": ASK},
        {"name": "editor", "scopes": ["edit"], "env": "RG_TEST_EDIT_TOKEN"},
        {"name": "ops", "scopes": ["ask", "edit"], "value": BOTH}]})


@pytest.fixture
def client():
    return TestClient(app_with(tokens(), {"RG_TEST_EDIT_TOKEN": EDIT}))


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("route", ["/v1/answer", "/v1/kg/edits"])
def test_no_token_or_an_unknown_one_is_401(client, route):
    for headers in ({}, bearer("nope-0123456789abcdef"), {"Authorization": f"Basic {ASK}"}, bearer("")):
        response = client.post(route, headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_the_wrong_scope_is_403_and_the_right_one_passes(client):
    assert client.post("/v1/answer", headers=bearer(ASK)).status_code == 200
    denied = client.post("/v1/kg/edits", headers=bearer(ASK))
    assert denied.status_code == 403 and "lacks the 'edit' scope" in denied.json()["detail"]
    assert client.post("/v1/answer", headers=bearer(EDIT)).status_code == 403
    assert client.post("/v1/kg/edits", headers=bearer(EDIT)).json() == {"who": "editor"}  # from the environment
    assert client.post("/v1/kg/edits", headers=bearer(BOTH)).json() == {"who": "ops"}


def test_auth_off_answers_loopback_clients_only():
    off = AuthConfig(mode="off")
    local = TestClient(app_with(off), client=("127.0.0.1", 5000))
    assert local.post("/v1/kg/edits").json() == {"who": "loopback"}
    assert TestClient(app_with(off), client=("::1", 5000)).post("/v1/answer").status_code == 200
    remote = TestClient(app_with(off), client=("10.1.2.3", 5000)).post("/v1/answer")
    assert remote.status_code == 403 and "loopback clients only" in remote.json()["detail"]
    assert is_loopback("127.0.0.9") and not is_loopback("testclient") and not is_loopback(None)


def test_settings_fail_naming_the_key_and_fix():
    with pytest.raises(ConfigError, match="auth.tokens is empty.*auth.mode: off"):
        validate_config({}, AuthConfig)
    with pytest.raises(ConfigError, match="set exactly one of env, value"):
        validate_config({"tokens": [{"name": "x", "scopes": ["ask"]}]}, AuthConfig)
    with pytest.raises(ConfigError, match="scopes"):
        validate_config({"tokens": [{"name": "x", "scopes": ["admin"], "value": ASK}]}, AuthConfig)
    with pytest.raises(ConfigError, match="RG_TEST_MISSING is not set"):
        Authenticator(AuthConfig.model_validate({"tokens": [{"name": "x", "scopes": ["ask"], "env": "RG_TEST_MISSING"}]}),
                      {})
    with pytest.raises(ConfigError, match="at least 16 are needed"):
        Authenticator(AuthConfig.model_validate({"tokens": [{"name": "x", "scopes": ["ask"], "value": "short"}]}))
    with pytest.raises(ConfigError, match="two tokens are equal"):
        Authenticator(AuthConfig.model_validate({"tokens": [{"name": "a", "scopes": ["ask"], "value": ASK},
                                                            {"name": "b", "scopes": ["edit"], "value": ASK}]}))


def test_the_endpoint_needs_auth_said_explicitly(tmp_path):
    from serve.config import ServeConfig

    with pytest.raises(ConfigError, match="auth is not set.*auth: {mode: off}"):
        validate_config({"kg": {"synthetic": {}}}, ServeConfig)
    assert validate_config({"kg": {"synthetic": {}}, "auth": {"mode": "off"}}, ServeConfig).kg_edits is None
    with pytest.raises(ConfigError, match="kg_edit_owner.min_replicas and kg_edit_owner.max_replicas to 1"):
        validate_config({"kg": {"synthetic": {}}, "auth": {"mode": "off"}, "kg_edit_owner": {"max_replicas": 2}},
                        ServeConfig)
    cfg = validate_config({"kg": {"synthetic": {}}, "auth": {"mode": "off"},
                           "kg_edits": {"log_path": "rel/kg.log"}}, ServeConfig)
    assert cfg.kg_edits.log_path.startswith("/")  # absolute where the app is built


def test_every_data_route_of_the_endpoint_needs_a_scope():
    from serve.app import api

    def walk(routes):  # Serve's ingress moves the class's routes into an included router
        for route in routes:
            inner = getattr(route, "original_router", None)
            yield from walk(inner.routes) if inner is not None else [route]

    scopes = {}
    for route in walk(api.routes):
        deps = getattr(route, "dependant", None)
        if deps is None:
            continue
        names = [d.call.__name__ for d in deps.dependencies if hasattr(d.call, "__name__")]
        scopes[route.path] = [n for n in names if n.startswith("require_")]
    assert scopes["/v1/answer"] == ["require_ask"] and scopes["/v1/chat/completions"] == ["require_ask"]
    assert scopes["/v1/models"] == ["require_ask"] and scopes["/v1/kg/version"] == ["require_ask"]
    assert scopes["/v1/kg/edits"] == ["require_edit"]
    open_routes = {p for p, s in scopes.items() if not s}
    assert open_routes <= {"/healthz", "/readyz", "/", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
