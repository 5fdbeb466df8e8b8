"""The gateway side of ModelBackfill for asyncio: one ``await emitter.emit(...)`` per request.

Same behaviour as the TypeScript emitter (clients/ts): background-class requests are dropped; an optional per-model
throttle publishes the first request after a quiet period at once and then at most one event per interval carrying
the newest request time. ``emit()`` never raises and never waits longer than ``publish_timeout``; while NATS is
unreachable, or a publish is not acknowledged in time, requests go to a bounded buffer holding the newest request
per model (older ones coalesced: only the newest matters for the idle window and for preemption), published as soon
as the connection is back. The connection is retried forever, also when NATS is down at start.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Dict, List, Literal, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

import nats
from nats.aio.client import Client

from .contract import encode_foreground_request, invalid_target, is_background, per_model_subject

log = logging.getLogger("flexinfer_gateway")

Outcome = Literal["published", "throttled", "buffered", "background", "invalid", "dropped"]
DropReason = Literal["overflow", "closed", "invalid"]

#: Throttle entries kept before quiet ones are forgotten (bounded whatever names the gateway sees).
MAX_THROTTLED_MODELS = 10_000
DEFAULT_MAX_BUFFERED = 10_000
DEFAULT_PUBLISH_TIMEOUT = 1.0
_FLUSH_RETRY = 0.25
_FLUSH_RETRY_MAX = 5.0
_FLUSH_BATCH = 256


@dataclass(frozen=True)
class ForegroundRequest:
    namespace: str
    model: str
    time: datetime
    id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class EmitterStats:
    emitted: int = 0
    throttled: int = 0
    background: int = 0
    invalid: int = 0
    buffered: int = 0
    coalesced: int = 0
    dropped: int = 0
    flushed: int = 0
    failed_publishes: int = 0
    pending: int = 0


@dataclass(frozen=True)
class ConnectionSettings:
    servers: List[str]
    inbox_prefix: Optional[str]
    nkeys_seed: Optional[str]
    user_credentials: Optional[str]
    user: Optional[str]
    password: Optional[str]


def connection_settings(
    servers: str, *, nkey_seed_file: Optional[str] = None, creds_file: Optional[str] = None, env: Optional[Dict[str, str]] = None
) -> ConnectionSettings:
    """``nats://gateway@host:4222`` (comma-separated for a cluster): the user names the reply inbox prefix
    ``_INBOX_gateway``, the only one deploy/nats/auth.conf lets the gateway receive acks on. The credential: the arguments,
    else ``?nkey_seed_file=`` / ``?creds_file=`` on the URL, else NATS_NKEY_SEED_FILE / NATS_CREDS_FILE. A password in
    the URL works against a development server of your own only (deploy/nats/auth.conf accepts no password)."""
    import os

    env = dict(os.environ) if env is None else env
    user = password = None
    out: List[str] = []
    for entry in servers.split(","):
        parts = urlsplit(entry.strip() if "://" in entry else f"nats://{entry.strip()}")
        query = parse_qs(parts.query)
        nkey_seed_file = nkey_seed_file or next(iter(query.get("nkey_seed_file", [])), None)
        creds_file = creds_file or next(iter(query.get("creds_file", [])), None)
        if parts.username is not None:
            user = unquote(parts.username)
            password = unquote(parts.password) if parts.password is not None else None
        host = parts.hostname or "127.0.0.1"
        out.append(f"{parts.scheme}://{host}:{parts.port or 4222}")
    if not nkey_seed_file and not creds_file:
        creds_file = env.get("NATS_CREDS_FILE") or None
        nkey_seed_file = None if creds_file else (env.get("NATS_NKEY_SEED_FILE") or None)
    if nkey_seed_file:
        _check_seed(nkey_seed_file)
    return ConnectionSettings(
        servers=out,
        inbox_prefix=f"_INBOX_{user}" if user else None,
        nkeys_seed=nkey_seed_file,
        user_credentials=creds_file,
        user=None if (nkey_seed_file or creds_file) else user,
        password=None if (nkey_seed_file or creds_file) else password,
    )


def _check_seed(path: str) -> None:
    """A missing or placeholder seed is a configuration error: named at start, not at the first request."""
    with open(path, encoding="utf-8") as f:
        seed = f.read().strip()
    if not (len(seed) == 58 and seed.startswith("SU")):
        raise ValueError(f"NKey seed file {path} holds no user seed (SU..., 58 characters)")


class ForegroundEmitter:
    """Create it inside the gateway's event loop, ``await start()``, then ``await emit(...)`` per request."""

    def __init__(
        self,
        servers: str,
        *,
        nkey_seed_file: Optional[str] = None,
        creds_file: Optional[str] = None,
        source: str = "flexinfer-gateway",
        throttle_ms: int = 0,
        publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        on_drop: Optional[Callable[[ForegroundRequest, DropReason], None]] = None,
    ) -> None:
        self._settings = connection_settings(servers, nkey_seed_file=nkey_seed_file, creds_file=creds_file)
        self.source = source
        self._throttle = max(0, throttle_ms) / 1000
        self._timeout = publish_timeout
        self._max_buffered = max(1, max_buffered)
        self._on_drop = on_drop
        self.stats = EmitterStats()
        self._nc: Optional[Client] = None
        self._connected = False
        self._closed = False
        self._buffer: "OrderedDict[str, ForegroundRequest]" = OrderedDict()
        self._models: Dict[str, Tuple[float, Optional[ForegroundRequest], Optional[asyncio.TimerHandle]]] = {}
        self._retry = _FLUSH_RETRY
        self._flush_task: Optional[asyncio.Task[None]] = None
        self._connect_task: Optional[asyncio.Task[None]] = None
        self._tasks: "set[asyncio.Task[object]]" = set()

    @property
    def connected(self) -> bool:
        return self._connected

    async def start(self) -> None:
        """Returns at once: the connection is made (and retried forever) in the background."""
        if self._connect_task is None:
            self._connect_task = asyncio.get_running_loop().create_task(self._connect_forever())

    async def __aenter__(self) -> "ForegroundEmitter":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connect_forever(self) -> None:
        s = self._settings
        while not self._closed:
            try:
                kwargs: Dict[str, object] = dict(
                    servers=s.servers,
                    name=self.source,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1,
                    connect_timeout=2,
                    ping_interval=5,
                    max_outstanding_pings=2,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    closed_cb=self._on_closed,
                    error_cb=self._on_error,
                )
                if s.inbox_prefix:
                    kwargs["inbox_prefix"] = s.inbox_prefix
                if s.nkeys_seed:
                    kwargs["nkeys_seed"] = s.nkeys_seed
                elif s.user_credentials:
                    kwargs["user_credentials"] = s.user_credentials
                elif s.user:
                    kwargs["user"] = s.user
                    if s.password is not None:
                        kwargs["password"] = s.password
                nc = await nats.connect(**kwargs)  # type: ignore[arg-type]
            except Exception as err:  # noqa: BLE001 - NATS down at start: try again, forever
                log.debug("NATS connect failed, retrying: %s", err)
                await asyncio.sleep(1 + random.random())
                continue
            if self._closed:
                await nc.close()
                return
            self._nc = nc
            self._connected = True
            self._schedule_flush(0)
            return

    async def _on_disconnected(self) -> None:
        self._connected = False

    async def _on_reconnected(self) -> None:
        self._connected = True
        self._retry = _FLUSH_RETRY
        self._schedule_flush(0)

    async def _on_closed(self) -> None:
        self._connected = False

    async def _on_error(self, err: Exception) -> None:
        log.debug("NATS: %s", err)

    def _drop(self, request: ForegroundRequest, why: DropReason) -> None:
        self.stats.dropped += 1
        if self._on_drop is not None:
            try:
                self._on_drop(request, why)
            except Exception:  # noqa: BLE001 - a gateway's callback must not break the emitter
                log.exception("on_drop callback failed")

    def _store(self, request: ForegroundRequest) -> None:
        key = f"{request.namespace}.{request.model}"
        held = self._buffer.pop(key, None)
        if held is not None:
            self.stats.coalesced += 1
            self._buffer[key] = held if held.time > request.time else request
        else:
            if len(self._buffer) >= self._max_buffered:
                _, oldest = self._buffer.popitem(last=False)
                self._drop(oldest, "overflow")
            self._buffer[key] = request
        self.stats.pending = len(self._buffer)

    async def _publish(self, request: ForegroundRequest) -> None:
        nc = self._nc
        if nc is None or not self._connected:
            raise ConnectionError("not connected")
        body = encode_foreground_request(
            namespace=request.namespace, model=request.model, id=request.id, time=request.time, source=self.source
        )
        # Nats-Msg-Id: a publish whose ack was lost and that is sent again from the buffer is stored once.
        await nc.jetstream(timeout=self._timeout).publish(
            per_model_subject(request.namespace, request.model),
            body,
            timeout=self._timeout,
            headers={"Nats-Msg-Id": request.id},
        )
        self.stats.emitted += 1

    async def _send(self, request: ForegroundRequest) -> Outcome:
        if self._closed:
            self._drop(request, "closed")
            return "dropped"
        if not self._connected:
            self.stats.buffered += 1
            self._store(request)
            return "buffered"
        key = f"{request.namespace}.{request.model}"
        held = self._buffer.get(key)
        if held is not None and held.time <= request.time:
            del self._buffer[key]
            self.stats.coalesced += 1
            self.stats.pending = len(self._buffer)
        try:
            await asyncio.wait_for(self._publish(request), self._timeout + 0.1)
            return "published"
        except Exception:  # noqa: BLE001 - unreachable, slow or refused: buffer it, never raise
            self.stats.failed_publishes += 1
            self.stats.buffered += 1
            self._store(request)
            self._schedule_flush(self._retry)
            return "buffered"

    def _schedule_flush(self, delay: float) -> None:
        if self._flush_task is not None or self._closed:
            return
        self._flush_task = asyncio.get_running_loop().create_task(self._flush(delay))

    async def _flush(self, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            while self._buffer and self._connected:
                batch = [self._buffer.popitem(last=False)[1] for _ in range(min(_FLUSH_BATCH, len(self._buffer)))]
                self.stats.pending = len(self._buffer)
                results = await asyncio.gather(*(self._publish(r) for r in batch), return_exceptions=True)
                failed = 0
                for r, result in zip(batch, results):
                    if isinstance(result, BaseException):
                        failed += 1
                        self.stats.failed_publishes += 1
                        self._store(r)
                    else:
                        self.stats.flushed += 1
                if failed:
                    self._retry = min(_FLUSH_RETRY_MAX, self._retry * 2)
                    break
                self._retry = _FLUSH_RETRY
        finally:
            self._flush_task = None
            if self._buffer and self._connected and not self._closed:
                self._schedule_flush(self._retry)

    def _flush_trailing(self, key: str) -> None:
        entry = self._models.get(key)
        if entry is None or entry[1] is None:
            return
        pending = entry[1]
        self._models[key] = (asyncio.get_running_loop().time(), None, None)
        task = asyncio.get_running_loop().create_task(self._send(pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def emit(
        self,
        namespace: str,
        model: str,
        *,
        workload_class: Optional[str] = None,
        time: Optional[datetime] = None,
    ) -> Outcome:
        """What became of one request; returns within about ``publish_timeout`` and never raises."""
        try:
            return await self._emit(namespace, model, workload_class, time)
        except Exception:  # noqa: BLE001 - never into the request path
            log.exception("emit failed")
            return "dropped"

    async def _emit(self, namespace: str, model: str, workload_class: Optional[str], time: Optional[datetime]) -> Outcome:
        if is_background(workload_class):
            self.stats.background += 1
            return "background"
        request = ForegroundRequest(namespace, model, time or datetime.now(timezone.utc))
        if invalid_target(namespace, model):
            self.stats.invalid += 1
            self._drop(request, "invalid")
            return "invalid"
        if self._throttle <= 0:
            return await self._send(request)
        loop = asyncio.get_running_loop()
        now = loop.time()
        key = f"{namespace}.{model}"
        entry = self._models.get(key)
        if entry is None:
            if len(self._models) >= MAX_THROTTLED_MODELS:
                for k, (last, _, timer) in list(self._models.items()):
                    if timer is None and now - last >= self._throttle:
                        del self._models[k]
            entry = (float("-inf"), None, None)
        last, _, timer = entry
        if timer is None and now - last >= self._throttle:
            self._models[key] = (now, None, None)
            return await self._send(request)
        self.stats.throttled += 1
        if timer is None:
            timer = loop.call_later(max(0.0, last + self._throttle - now), self._flush_trailing, key)
        self._models[key] = (last, request, timer)
        return "throttled"

    async def close(self, timeout: float = 2.0) -> None:
        """Publishes pending trailing events and the buffer (waiting at most ``timeout`` for NATS), counts the rest
        as dropped, closes the connection."""
        for key, (_, pending, timer) in list(self._models.items()):
            if timer is not None:
                timer.cancel()
            if pending is not None:
                self.stats.buffered += 1
                self._store(pending)
        self._models.clear()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._buffer and self._connected and loop.time() < deadline:
            if self._flush_task is None:
                self._schedule_flush(0)
            task = self._flush_task
            if task is not None:
                await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
            if self._buffer:
                await asyncio.sleep(min(self._retry, max(0.0, deadline - loop.time())))
        self._closed = True
        for request in self._buffer.values():
            self._drop(request, "closed")
        self._buffer.clear()
        self.stats.pending = 0
        for t in [self._flush_task, self._connect_task, *self._tasks]:
            if t is not None and not t.done():
                t.cancel()
        if self._nc is not None:
            try:
                await asyncio.wait_for(self._nc.close(), 2)
            except Exception:  # noqa: BLE001
                pass
