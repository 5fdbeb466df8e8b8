import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


def load(name: str) -> Any:
    return json.loads((CONFORMANCE / name).read_text())


class Control:
    """The test harness's server control (test/integration/clients/harness.ts): stop, start, recorded events."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _call(self, method: str, path: str) -> Any:
        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def down(self) -> None:
        self._call("POST", "/down")

    def up(self) -> None:
        self._call("POST", "/up")

    def reset(self) -> None:
        self._call("POST", "/reset")

    def events(self) -> Any:
        return self._call("GET", "/events")


@pytest.fixture(scope="session")
def server() -> dict:
    """The real nats-server of the harness; run through `npx vitest run test/integration/clients/python.test.ts`."""
    names = ("FLEXINFER_TEST_NATS_URL", "FLEXINFER_TEST_NKEY_SEED_FILE", "FLEXINFER_TEST_CONTROL_URL")
    if not all(os.environ.get(n) for n in names):
        pytest.skip("no test nats-server: run through npx vitest run test/integration/clients/python.test.ts")
    return {
        "url": os.environ["FLEXINFER_TEST_NATS_URL"],
        "seed": os.environ["FLEXINFER_TEST_NKEY_SEED_FILE"],
        "control": Control(os.environ["FLEXINFER_TEST_CONTROL_URL"]),
    }
