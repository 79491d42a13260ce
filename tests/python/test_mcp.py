"""decide as an MCP server, driven by the real MCP client (the `mcp` package from PyPI) over both
transports: streamable HTTP at /mcp on a running server (tenant keys, limits shared with the
HTTP API, a wrong key refused with the API's 401) and stdio (`decide mcp` spawned by the client).

Each transport lists the tools and calls `decide`, `classify` and a per-question-type tool; the
answers are compared with the HTTP API's for the same body (same probabilities), their
probabilities and audit blocks checked, and invalid calls must be MCP tool errors
(`isError: true`) carrying the HTTP API's 4xx message.
"""
import asyncio
import json
import os
import re
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client as mcp_stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import ADMIN, ROOT, Server, admin

TICKET = "I was charged twice for my subscription this month. Please refund the extra charge."
DECIDE_BODY = {
    "state": TICKET,
    "questions": {
        "refund": {"type": "noul", "instructions": "The customer asks for a refund."},
        "team": {"type": "choice", "instructions": "Which team owns this ticket?",
                 "criteria": {"billing": None, "shipping": None, "technical": None}},
        "anger": {"type": "score", "instructions": "How angry is the customer?",
                  "criteria": ["calm", "annoyed", "furious"]},
    },
}
CLASSIFY_BODY = {
    "state": TICKET,
    "question": "Triage this support ticket.",
    "schema": {"type": "object", "additionalProperties": False, "required": ["refund", "team"],
               "properties": {"refund": {"type": "boolean"}, "team": {"enum": ["billing", "shipping"]}}},
}
# Invalid calls: (tool, arguments, the HTTP endpoint taking the same body).
INVALID = [
    ("decide", {"state": "", "questions": DECIDE_BODY["questions"]}, "/v1/systemone"),
    ("decide", {"state": TICKET, "questions": {"q": {"type": "choice", "criteria": {"only": None}}}}, "/v1/systemone"),
    ("classify", {**CLASSIFY_BODY, "schema": {"type": "string"}}, "/v1/classify"),
]
# Close enough for reads of f32 weights that a cached prefix may have computed (README: ~1e-5).
SAME = 1e-4


def post(server, path, body, key):
    request = urllib.request.Request(
        f"{server.base}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def http_message(body):
    """The message of a Jev error body: a validation list's first `msg`, else `message`."""
    detail = body["detail"]
    return detail[0]["msg"] if isinstance(detail, list) else detail["message"]


def tenant_key(server, name, limits=None):
    _, tenant = admin(server, "POST", "/tenants", {"name": name, **({"limits": limits} if limits else {})})
    return admin(server, "POST", f"/tenants/{tenant['id']}/keys")[1]["key"]


@pytest.fixture(scope="module")
def tenant_server():
    running = Server("--admin-key", ADMIN)
    running.key = tenant_key(running, "mcp-team")
    running.limited_key = tenant_key(running, "mcp-limited", {"requests_per_minute": 2})
    # The team's own question type (guests/examples/sentiment-scale, built by plugins/build.rs).
    wasm = ROOT / "target" / "guests" / "wasm32-wasip2" / "release" / "openai_sentiment.wasm"
    upload = urllib.request.Request(
        f"{running.base}/v1/plugins/openai-sentiment", method="PUT", data=wasm.read_bytes(),
        headers={"Authorization": f"Bearer {running.key}", "Content-Type": "application/wasm"})
    with urllib.request.urlopen(upload) as response:
        assert json.load(response)["source"] == "tenant"
    yield running
    running.stop()


def http_client(server, key, **options):
    """The real client over streamable HTTP, presenting `key`."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120, **options)
    return http, Client(streamable_http_client(f"{server.base}/mcp", http_client=http), **client_options())


def client_options():
    return {"read_timeout_seconds": 120}


def stdio_client(*extra, errlog=None):
    """The real client spawning `decide mcp` with the test model (its log to `errlog`)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    binary = os.environ.get("DECIDE_BIN", str(target / "release" / "decide"))
    model = os.environ.get("DECIDE_TEST_MODEL", str(ROOT / ".models" / "smol.gguf"))
    params = StdioServerParameters(
        command=binary,
        args=["mcp", "--model", model, "--calibration-questions", "none", "--tune-questions", "none",
              "--data-dir", tempfile.mkdtemp(prefix="decide-mcp-"), *extra],
        env={**os.environ, "DECIDE_LOG": "warn"})
    transport = mcp_stdio_client(params, errlog=errlog) if errlog else params
    return Client(transport, **client_options())


def check_distribution(probabilities, options):
    assert set(probabilities) == set(options), probabilities
    assert all(0.0 <= p <= 1.0 for p in probabilities.values()), probabilities
    assert abs(sum(probabilities.values()) - 1.0) < 1e-6, probabilities


def check_audit(audit):
    for field in ["readout", "renderer", "label_scheme", "setup_source", "calibration_temperature",
                  "temperature_source", "min_option_mass"]:
        assert field in audit, audit
    assert 0.0 < audit["option_mass"] <= 1.0, audit
    assert audit["input_tokens"] > 0, audit


async def check_tools(client):
    """Lists the tools; returns them by name."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in ["decide", "classify", "systemone-noul", "systemone-choice", "systemone-score",
                 "openai-predicate", "openai-choice", "openai-score"]:
        assert name in tools, sorted(tools)
    decide = tools["decide"].input_schema
    assert decide["type"] == "object" and set(decide["required"]) == {"state", "questions"}, decide
    assert set(tools["classify"].input_schema["required"]) >= {"state", "question", "schema"}
    noul = tools["systemone-noul"]
    assert "SystemOne noul" in noul.description and "Example question" in noul.description, noul.description
    assert noul.input_schema["properties"]["question"]["examples"][0]["type"] == "noul"
    assert noul.annotations.read_only_hint is True
    return tools


async def check_decide(client, server=None, key=None):
    """Calls `decide`; with a server, compares with /v1/systemone for the same body."""
    result = await client.call_tool("decide", DECIDE_BODY)
    assert not result.is_error, result.content
    answer = result.structured_content
    assert json.loads(result.content[0].text)["answers"] == answer["answers"]
    options = {"refund": ["true", "false"], "team": ["billing", "shipping", "technical"],
               "anger": ["0", "1", "2"]}
    for question, keys in options.items():
        check_distribution(answer["probabilities"][question], keys)
        check_audit(answer["audit"][question])
    assert answer["answers"]["refund"]["noul"] == pytest.approx(answer["probabilities"]["refund"]["true"])
    if server is not None:
        status, http = post(server, "/v1/systemone", DECIDE_BODY, key)
        assert status == 200, http
        assert set(http["answers"]) == set(answer["answers"])
        for question, fields in http["answers"].items():
            mcp_fields = answer["answers"][question]
            assert mcp_fields.keys() == fields.keys(), (mcp_fields, fields)
            for field, value in fields.items():
                if isinstance(value, float):
                    assert mcp_fields[field] == pytest.approx(value, abs=SAME), (question, field)
                else:
                    assert mcp_fields[field] == value, (question, field)
    return answer


async def check_classify(client, server=None, key=None):
    result = await client.call_tool("classify", CLASSIFY_BODY)
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["audit"]["backend_requests"] == 1, answer["audit"]
    for decision in answer["decisions"]:
        probabilities = [c["probability"] for c in decision["candidates"]]
        assert abs(sum(probabilities) - 1.0) < 1e-6, decision
    if server is not None:
        status, http = post(server, "/v1/classify", CLASSIFY_BODY, key)
        assert status == 200, http
        assert [d["pointer"] for d in http["decisions"]] == [d["pointer"] for d in answer["decisions"]]
        for mine, theirs in zip(answer["decisions"], http["decisions"]):
            assert mine["probability"] == pytest.approx(theirs["probability"], abs=SAME), (mine, theirs)


async def check_typed(client, decided):
    """A per-type tool: the same question as `decide`'s `team` gives the same distribution."""
    team = {k: v for k, v in DECIDE_BODY["questions"]["team"].items() if k != "type"}
    result = await client.call_tool("systemone-choice", {"state": TICKET, "question": team})
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["answer"]["type"] == "choice"
    check_distribution(answer["probabilities"], ["billing", "shipping", "technical"])
    check_audit(answer["audit"])
    for option, p in decided["probabilities"]["team"].items():
        assert answer["probabilities"][option] == pytest.approx(p, abs=SAME), option
    wrong = await client.call_tool("systemone-choice", {"state": TICKET, "question": {**team, "type": "noul"}})
    assert wrong.is_error and "this tool asks `choice` questions" in wrong.content[0].text
    assert wrong.structured_content["status"] == 422


async def check_invalid(client, server=None, key=None):
    """Invalid calls are tool errors with the HTTP API's message, status and body."""
    for tool, arguments, path in INVALID:
        result = await client.call_tool(tool, arguments)
        assert result.is_error, (tool, arguments)
        body = result.structured_content
        assert 400 <= body["status"] < 500, body
        assert result.content[0].text == http_message(body)
        if server is not None:
            status, http = post(server, path, arguments, key)
            assert status == body["status"], (status, http, body)
            assert http_message(http) == result.content[0].text
            assert http == {k: v for k, v in body.items() if k != "status"}
    with pytest.raises(MCPError, match="no tool `nope`"):
        await client.call_tool("nope", {})


async def check_tenant_plugin(client):
    """The tenant's own upload is a tool of its own, described from the plugin's info and example."""
    tool = {t.name: t for t in (await client.list_tools()).tools}["openai-sentiment"]
    assert "sentiment scale" in tool.description and "(tenant, version" in tool.description, tool.description
    example = tool.input_schema["properties"]["question"]["examples"][0]
    assert example == {"type": "sentiment", "aspect": "the delivery", "levels": 5}
    result = await client.call_tool("openai-sentiment", {"state": "The parcel came late and crushed.", "question": example})
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["answer"]["type"] == "sentiment" and -1 <= answer["answer"]["score"] <= 1, answer
    assert len(answer["probabilities"]) == 5 and abs(sum(answer["probabilities"].values()) - 1) < 1e-6
    check_audit(answer["audit"])


def test_streamable_http_with_a_tenant_key(tenant_server):
    async def run():
        http, client = http_client(tenant_server, tenant_server.key)
        async with http, client:
            await check_tools(client)
            decided = await check_decide(client, tenant_server, tenant_server.key)
            await check_classify(client, tenant_server, tenant_server.key)
            await check_typed(client, decided)
            await check_invalid(client, tenant_server, tenant_server.key)
            await check_tenant_plugin(client)
        http, client = http_client(tenant_server, tenant_server.limited_key)
        async with http, client:
            others = {tool.name for tool in (await client.list_tools()).tools}
            assert "openai-sentiment" not in others and "decide" in others, others
        # A client of the handshake era (initialize, 2025-11-25) is served too.
        http, client = http_client(tenant_server, tenant_server.key)
        async with http, Client(streamable_http_client(f"{tenant_server.base}/mcp", http_client=http),
                                mode="legacy", **client_options()) as legacy:
            assert legacy.protocol_version < "2026-07-28"
            result = await legacy.call_tool("systemone-noul", {"state": TICKET, "question": {"instructions": "A refund?"}})
            assert not result.is_error and set(result.structured_content["probabilities"]) == {"true", "false"}
    asyncio.run(run())


def test_a_tenants_limits_are_shared_with_the_http_api(tenant_server):
    """requests_per_minute 2: one MCP call and one HTTP request use it up; then both refuse."""
    key = tenant_server.limited_key
    small = {"state": TICKET, "questions": {"refund": DECIDE_BODY["questions"]["refund"]}}

    async def run():
        http, client = http_client(tenant_server, key)
        async with http, client:
            assert not (await client.call_tool("decide", small)).is_error
            assert post(tenant_server, "/v1/systemone", small, key)[0] == 200
            refused = await client.call_tool("decide", small)
            assert refused.is_error and refused.structured_content["status"] == 429, refused
            assert refused.structured_content["retry_after_s"] >= 1
            status, body = post(tenant_server, "/v1/systemone", small, key)
            assert status == 429
            same = lambda text: re.sub(r"retry in \d+ s", "retry in N s", text)
            assert same(refused.content[0].text) == same(http_message(body))
            assert "requests_per_minute = 2" in refused.content[0].text
    asyncio.run(run())


def test_a_wrong_key_on_mcp_is_refused_like_the_http_api(tenant_server):
    statuses = []

    async def record(response):
        statuses.append(response.status_code)

    async def run():
        http, client = http_client(tenant_server, "dk_" + "0" * 48, event_hooks={"response": [record]})
        async with http:
            with pytest.raises(BaseException):
                async with client:
                    await client.list_tools()
    asyncio.run(run())
    assert statuses and set(statuses) == {401}, statuses
    for key in ["dk_" + "0" * 48, None]:
        mcp_status, mcp_body = post(tenant_server, "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, key)
        http_status, http_body = post(tenant_server, "/v1/systemone", DECIDE_BODY, key)
        assert (mcp_status, mcp_body) == (http_status, http_body) == (401, http_body), (mcp_body, http_body)


def test_stdio():
    async def run():
        async with stdio_client("--api-key", "sekret", "--key", "sekret") as client:
            await check_tools(client)
            decided = await check_decide(client)
            await check_classify(client)
            await check_typed(client, decided)
            await check_invalid(client)
    asyncio.run(run())


def test_stdio_refuses_a_key_the_http_api_would_refuse():
    """`decide mcp` with a key the HTTP API would refuse stops at start, with the API's message."""
    with tempfile.TemporaryFile("w+") as log:
        async def run():
            async with stdio_client("--api-key", "sekret", "--key", "wrong", errlog=log) as client:
                await client.list_tools()
        with pytest.raises(BaseException):
            asyncio.run(run())
        log.seek(0)
        assert "the API key is not valid for this server (setting --key / DECIDE_MCP_KEY)" in log.read()
