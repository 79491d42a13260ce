"""Tenant keys through the real SDKs: a tenant's key works, an unknown or revoked one raises
each SDK's own authentication error (the server's 401 bodies are what they parse)."""
import json
import urllib.request

import openai
import pytest
from typesafe_sdk import Noul, RetryPolicy, TypeSafeAuthenticationError, TypeSafeClient

from conftest import ADMIN, Server, admin

TICKET = "I was charged twice for my subscription this month. Please refund the extra charge."
UNKNOWN = "dk_" + "0" * 48


@pytest.fixture(scope="module")
def tenant_server():
    running = Server("--admin-key", ADMIN)
    status, tenant = admin(running, "POST", "/tenants", {"name": "sdk-team"})
    assert status == 201
    running.tenant_id = tenant["id"]
    yield running
    running.stop()


def new_key(server):
    status, key = admin(server, "POST", f"/tenants/{server.tenant_id}/keys")
    assert status == 201 and key["key"].startswith("dk_")
    return key


def openai_client(server, key):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=key, max_retries=0)


def typesafe_client(server, key):
    return TypeSafeClient(api_key=key, base_url=server.base, retry=RetryPolicy(max_retries=0), timeout=120)


def ask_openai(server, key):
    return openai_client(server, key).decisions.create(
        model="gpt-6-luna", input=TICKET, questions=[{"type": "predicate", "instructions": "Refund?"}])


def ask_typesafe(server, key):
    with typesafe_client(server, key) as sdk:
        return sdk.system_one(state=TICKET, questions={"q": Noul(instructions="Refund?")})


def test_a_tenant_key_works_in_both_sdks(tenant_server):
    key = new_key(tenant_server)["key"]
    assert ask_openai(tenant_server, key).answers[0].type == "predicate"
    assert 0 <= ask_typesafe(tenant_server, key).nouls["q"].noul <= 1
    _, usage = admin(tenant_server, "GET", f"/tenants/{tenant_server.tenant_id}/usage")
    assert usage["usage"]["requests"] >= 2 and usage["usage"]["input_tokens"] > 0


def test_unknown_and_revoked_keys_raise_authentication_errors(tenant_server):
    made = new_key(tenant_server)
    assert ask_openai(tenant_server, made["key"]).answers
    status, _ = admin(tenant_server, "DELETE", f"/tenants/{tenant_server.tenant_id}/keys/{made['id']}")
    assert status == 204
    for key, why in ((UNKNOWN, "not valid"), (made["key"], "revoked")):
        with pytest.raises(openai.AuthenticationError) as raised:
            ask_openai(tenant_server, key)
        assert raised.value.status_code == 401 and why in str(raised.value)
        with pytest.raises(TypeSafeAuthenticationError) as raised:
            ask_typesafe(tenant_server, key)
        assert raised.value.status == 401 and why in str(raised.value)
