"""The shared emitter scenarios (clients/conformance/emitter.json) and the client's own guarantees, against a real
nats-server running deploy/nats/auth.conf, logged in as the gateway user with its NKey."""

import asyncio
import threading
import time
import tracemalloc
from datetime import datetime

import pytest
from conftest import load

from flexinfer_gateway import ForegroundEmitter, SyncForegroundEmitter

SCENARIOS = load("emitter.json")["scenarios"]


def order(e: dict) -> tuple:
    return (e["subject"], e["time"])


async def wait_connected(emitter: ForegroundEmitter) -> None:
    deadline = time.monotonic() + 10
    while not emitter.connected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert emitter.connected


async def settle(control, expected: int) -> list:
    deadline = time.monotonic() + 20
    while len(control.events()) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.7)
    return control.events()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(server: dict, scenario: dict) -> None:
    async def run() -> None:
        control = server["control"]
        await asyncio.to_thread(control.reset)
        drops = []
        opts = scenario["options"]
        emitter = ForegroundEmitter(
            server["url"],
            nkey_seed_file=server["seed"],
            source=opts["source"],
            throttle_ms=opts.get("throttleMs", 0),
            max_buffered=opts.get("maxBuffered", 10_000),
            on_drop=lambda r, why: drops.append([r.model, why]),
        )
        await emitter.start()
        try:
            await wait_connected(emitter)
            outcomes = []
            slowest = 0.0
            for step in scenario["steps"]:
                if "emit" in step:
                    e = step["emit"]
                    started = time.monotonic()
                    outcomes.append(
                        await emitter.emit(
                            e["namespace"],
                            e["model"],
                            workload_class=e.get("workloadClass"),
                            time=datetime.fromisoformat(e["time"].replace("Z", "+00:00")),
                        )
                    )
                    slowest = max(slowest, time.monotonic() - started)
                elif "down" in step:
                    await asyncio.to_thread(control.down)
                elif "up" in step:
                    await asyncio.to_thread(control.up)
                else:
                    await asyncio.sleep(step["sleep"] / 1000)
            assert outcomes == scenario["outcomes"]
            assert slowest <= 1.2
            stored = await settle(control, len(scenario["events"]))
            got = sorted(
                ({"subject": r["subject"], "time": r["event"]["time"], "data": r["event"]["data"]} for r in stored),
                key=order,
            )
            assert got == sorted(scenario["events"], key=order)
            for r in stored:
                assert "rejected" not in r, r["rejected"]
                ev = r["event"]
                assert ev["specversion"] == "1.0"
                assert ev["type"] == "ai.flexinfer.foreground.request"
                assert ev["datacontenttype"] == "application/json"
                assert ev["source"] == opts["source"]
                assert isinstance(ev["id"], str) and ev["id"]
            assert len({r["event"]["id"] for r in stored}) == len(stored)
            assert drops == scenario["drops"]
        finally:
            await emitter.close(1.0)

    asyncio.run(run())


def test_sync_entry_point(server: dict) -> None:
    """The threaded emitter: same NKey login, same events, from plain threads."""
    control = server["control"]
    control.reset()
    with SyncForegroundEmitter(server["url"], nkey_seed_file=server["seed"], source="sync") as emitter:
        deadline = time.monotonic() + 10
        while not emitter.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        outcomes = []
        threads = [
            threading.Thread(target=lambda i=i: outcomes.append(emitter.emit("team-s", f"m{i}"))) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert outcomes == ["published"] * 8
        assert emitter.emit("team-s", "m0", workload_class="background") == "background"
    deadline = time.monotonic() + 10
    while len(control.events()) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(r["subject"] for r in control.events()) == [
        f"flexinfer.events.foreground.request.team-s.m{i}" for i in range(8)
    ]


def test_down_at_start_never_raises_and_is_bounded(server: dict) -> None:
    """NATS down when the gateway starts and for a burst of requests to many models: every emit() answers at once
    without raising, the buffer holds at most max_buffered models (the newest request of each), memory stays flat,
    and what was kept is published once the server is back."""
    control = server["control"]

    async def run() -> None:
        await asyncio.to_thread(control.reset)
        await asyncio.to_thread(control.down)
        drops = []
        emitter = ForegroundEmitter(
            server["url"], nkey_seed_file=server["seed"], source="bounded", max_buffered=50,
            on_drop=lambda r, why: drops.append(why),
        )
        await emitter.start()
        try:
            tracemalloc.start()
            # Every other request for one hot model (coalesced, never dropped), the rest across 500 cold ones.
            # "At once" is each emit() answering without waiting for NATS (its publish timeout is 1 s), not the
            # burst's total: 20,000 traced emits took 10.5 s on a CI machine at load ~10.
            slowest = 0.0
            for i in range(20_000):
                one = time.monotonic()
                assert await emitter.emit("team-b", "hot" if i % 2 == 0 else f"m{i % 500}") == "buffered"
                slowest = max(slowest, time.monotonic() - one)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert slowest < 1.0, f"an emit() took {slowest:.3f} s with NATS down"
            assert emitter.stats.pending == 50
            assert peak < 8 * 1024 * 1024
            assert emitter.stats.coalesced > 0 and set(drops) == {"overflow"}
            # A bad name and a broken callback do not raise either.
            assert await emitter.emit("Bad Namespace", "m") == "invalid"
            await asyncio.to_thread(control.up)
            await wait_connected(emitter)
            deadline = time.monotonic() + 20
            # A batch being published is neither pending nor flushed yet: wait for the flushed count.
            while (emitter.stats.pending or emitter.stats.flushed < 50) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert emitter.stats.pending == 0 and emitter.stats.flushed == 50
        finally:
            await emitter.close(1.0)
        # The 50 models requested last, each once: the hot one and the 49 last cold ones (m499, m497, ...).
        events = await settle(control, 50)
        assert sorted(r["event"]["data"]["model"] for r in events) == sorted(
            ["hot"] + [f"m{499 - 2 * k}" for k in range(49)]
        )

    asyncio.run(run())


def test_refused_credentials_are_named_at_start(tmp_path) -> None:
    seed = tmp_path / "placeholder.nk"
    seed.write_text("REPLACE-ME")
    with pytest.raises(ValueError, match="holds no user seed"):
        ForegroundEmitter("nats://gateway@127.0.0.1:4222", nkey_seed_file=str(seed))
