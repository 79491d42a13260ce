"""Median wall time of one `decide` call (3 questions) over HTTP /v1/systemone, MCP /mcp and MCP
stdio (`decide mcp`), with the real `mcp` client, the release binary and the test model.

Run: pip install -r tests/python/requirements.txt
     DECIDE_TEST_MODEL=.models/smol.gguf python3 bench/mcp_latency.py
Prints the figures (no report file).
"""
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from conftest import Server
from test_mcp import DECIDE_BODY, post, stdio_client
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
N = 30
def med(xs): return f"median {statistics.median(xs)*1e3:.1f} ms, p90 {sorted(xs)[int(len(xs)*0.9)]*1e3:.1f} ms"
async def mcp_calls(client):
    times = []
    for _ in range(N):
        t = time.perf_counter(); r = await client.call_tool("decide", DECIDE_BODY); times.append(time.perf_counter() - t)
        assert not r.is_error
    return times
async def main():
    s = Server()
    try:
        post(s, "/v1/systemone", DECIDE_BODY, None)
        times = []
        for _ in range(N):
            t = time.perf_counter(); assert post(s, "/v1/systemone", DECIDE_BODY, None)[0] == 200; times.append(time.perf_counter() - t)
        print("HTTP /v1/systemone:", med(times))
        async with httpx2.AsyncClient(timeout=120) as http, Client(streamable_http_client(f"{s.base}/mcp", http_client=http)) as c:
            t = time.perf_counter(); await c.list_tools(); print(f"MCP /mcp tools/list: {(time.perf_counter()-t)*1e3:.1f} ms")
            print("MCP /mcp decide:", med(await mcp_calls(c)))
    finally:
        s.stop()
    t = time.perf_counter()
    async with stdio_client() as c:
        print(f"MCP stdio: spawn to connected {time.perf_counter()-t:.2f} s")
        t = time.perf_counter(); await c.list_tools(); print(f"MCP stdio tools/list: {(time.perf_counter()-t)*1e3:.1f} ms")
        print("MCP stdio decide:", med(await mcp_calls(c)))
asyncio.run(main())
