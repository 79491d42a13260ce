"""A real `decide` server for the SDK tests: the release binary, SmolLM2, a free loopback port.

The binary is `$DECIDE_BIN`, else `release/decide` in `$CARGO_TARGET_DIR` or `target/` (built by
`cargo test --release` or `cargo build --release`); the model is `$DECIDE_TEST_MODEL` or `.models/smol.gguf`.
"""
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The admin key of the servers the tenant tests start (`--admin-key`).
ADMIN = "admin-sekret"


def admin(server, method, path, body=None):
    """One admin API call (`/admin/v1` + path) with the ADMIN key: (status, parsed body or None)."""
    request = urllib.request.Request(
        f"{server.base}/admin/v1{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        text = response.read()
        return response.status, (json.loads(text) if text else None)


class Server:
    def __init__(self, *extra: str) -> None:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        binary = os.environ.get("DECIDE_BIN", str(target / "release" / "decide"))
        model = os.environ.get("DECIDE_TEST_MODEL", str(ROOT / ".models" / "smol.gguf"))
        assert Path(binary).exists(), f"{binary} is missing: run `cargo build --release`"
        assert Path(model).exists(), f"{model} is missing: run `scripts/fetch-model.sh smol`"
        # Each server gets a fresh tenant store, so nothing left from elsewhere turns tenancy on.
        self.data_dir = tempfile.mkdtemp(prefix="decide-data-")
        self.process = subprocess.Popen(
            [binary, "serve", "--model", model, "--port", "0", "--calibration-questions", "none", "--tune-questions", "none",
             "--data-dir", self.data_dir, *extra],
            stdout=subprocess.PIPE,
            env={**os.environ, "DECIDE_LOG": "warn"},
            text=True,
        )
        line = self.process.stdout.readline().strip()
        assert line.startswith("decide listening on "), line
        self.base = line.removeprefix("decide listening on ")
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.base}/health") as response:
                    if json.load(response)["status"] == "ok":
                        break
            except Exception:
                pass
            assert time.time() < deadline, "server not ready"
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="session")
def server():
    running = Server()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def keyed_server():
    running = Server("--api-key", "sekret")
    yield running
    running.stop()
