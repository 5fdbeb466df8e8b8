"""The emitter for threaded gateways (WSGI servers, scripts): the asyncio emitter on an event loop of its own in a
daemon thread. ``emit()`` blocks the calling thread for at most about ``publish_timeout`` and never raises."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from datetime import datetime
from typing import Any, Optional

from .emitter import EmitterStats, ForegroundEmitter, Outcome

log = logging.getLogger("flexinfer_gateway")


class SyncForegroundEmitter:
    """Same arguments as :class:`ForegroundEmitter`; connects (and retries forever) as soon as it is made."""

    def __init__(self, servers: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="flexinfer-emitter", daemon=True)
        self._thread.start()
        self._timeout = float(options.get("publish_timeout", 1.0))

        async def make() -> ForegroundEmitter:
            emitter = ForegroundEmitter(servers, **options)
            await emitter.start()
            return emitter

        try:
            self._emitter = asyncio.run_coroutine_threadsafe(make(), self._loop).result(10)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    @property
    def stats(self) -> EmitterStats:
        return self._emitter.stats

    @property
    def connected(self) -> bool:
        return self._emitter.connected

    def emit(
        self, namespace: str, model: str, *, workload_class: Optional[str] = None, time: Optional[datetime] = None
    ) -> Outcome:
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._emitter.emit(namespace, model, workload_class=workload_class, time=time), self._loop
            )
            # The emitter answers within publish_timeout; the margin covers a busy loop thread.
            return future.result(self._timeout + 1.0)
        except concurrent.futures.TimeoutError:
            log.warning("emit did not answer within %.1f s; the request is still on its way", self._timeout + 1.0)
            return "buffered"
        except Exception:  # noqa: BLE001 - never into the request path
            log.exception("emit failed")
            return "dropped"

    def close(self, timeout: float = 2.0) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._emitter.close(timeout), self._loop).result(timeout + 5)
        except Exception:  # noqa: BLE001
            log.exception("close failed")
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self) -> "SyncForegroundEmitter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
