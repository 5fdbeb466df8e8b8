"""The LiteLLM callback in the real LiteLLM proxy (from PyPI, version pinned in requirements-test.txt), in front of a
small fake OpenAI upstream on loopback: every request that is not background class reaches NATS as a foreground
request for the Model the model map names; background ones and unmapped ones do not; the upstream's answer comes
back unchanged."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("litellm")


class FakeOpenAI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        answer = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "?"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hello from upstream"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
        }
        raw = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(port: int, model: str, headers: dict = {}) -> dict:  # noqa: B006
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-test", **headers},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def proxy(server: dict, tmp_path_factory):
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    d = tmp_path_factory.mktemp("litellm")
    model_map = d / "model-map.json"
    model_map.write_text(json.dumps({"rules": [{"match": {"model": "GPT-4o"}, "to": "team-a/gemma-big"}]}))
    entries = "".join(
        f"""
  - model_name: {name}
    litellm_params:
      model: openai/{name.lower()}
      api_base: {base}
      api_key: fake"""
        for name in ("gemma", "GPT-4o", "Unmapped Model")
    )
    config = d / "config.yaml"
    config.write_text(
        f"""model_list:{entries}
litellm_settings:
  callbacks: flexinfer_gateway.litellm.proxy_handler_instance
general_settings:
  master_key: sk-test
"""
    )
    port = free_port()
    env = {
        **os.environ,
        "FLEXINFER_NATS_URL": server["url"],
        "NATS_NKEY_SEED_FILE": server["seed"],
        "FLEXINFER_MODEL_MAP": str(model_map),
        # No network but loopback: the bundled model cost map, no telemetry.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
    }
    env.pop("FLEXINFER_WORKLOAD_CLASS", None)
    log = open(d / "proxy.log", "w")
    litellm_bin = Path(sys.executable).with_name("litellm")
    proc = subprocess.Popen(
        [str(litellm_bin), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"litellm exited {proc.returncode}:\n{(d / 'proxy.log').read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"litellm not up in 120 s:\n{(d / 'proxy.log').read_text()[-4000:]}")
                time.sleep(0.5)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        upstream.shutdown()
        log.close()


def events_settled(control, expected: int) -> list:
    # The proxy's emitter connects on its first request, in the background: on a loaded CI machine (load ~10) the
    # first events took longer than 20 s to be stored, and then landed in the next test's capture.
    deadline = time.monotonic() + 60
    while len(control.events()) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    return control.events()


def test_foreground_requests_reach_nats(server: dict, proxy: int) -> None:
    control = server["control"]
    control.reset()
    answer = chat(proxy, "gemma")
    assert answer["choices"][0]["message"]["content"] == "hello from upstream"
    chat(proxy, "GPT-4o")
    # Background class and a model the map cannot name: answered, never published.
    chat(proxy, "gemma", {"X-FlexInfer-Workload-Class": "background"})
    chat(proxy, "Unmapped Model")
    events = events_settled(control, 2)
    got = sorted((r["subject"], r["event"]["data"]["namespace"], r["event"]["data"]["model"]) for r in events)
    assert got == [
        ("flexinfer.events.foreground.request.flexinfer-system.gemma", "flexinfer-system", "gemma"),
        ("flexinfer.events.foreground.request.team-a.gemma-big", "team-a", "gemma-big"),
    ]
    for r in events:
        assert "rejected" not in r
        assert r["event"]["source"] == "litellm"


def test_nats_down_never_fails_a_request(server: dict, proxy: int) -> None:
    control = server["control"]
    control.reset()
    control.down()
    try:
        started = time.monotonic()
        answer = chat(proxy, "gemma")
        assert answer["choices"][0]["message"]["content"] == "hello from upstream"
        # The hook waits at most the publish timeout.
        assert time.monotonic() - started < 5
    finally:
        control.up()
    # Buffered while NATS was down, published once it is back.
    events = events_settled(control, 1)
    assert [r["subject"] for r in events] == ["flexinfer.events.foreground.request.flexinfer-system.gemma"]
