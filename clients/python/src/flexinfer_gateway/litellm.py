"""A LiteLLM proxy callback: every request that is not background class is a foreground request for its Model.

In the proxy's config.yaml::

    litellm_settings:
      callbacks: flexinfer_gateway.litellm.proxy_handler_instance

configured from the proxy's environment:

- ``FLEXINFER_NATS_URL`` (else ``NATS_URL``): ``nats://gateway@nats.nats.svc:4222``; with ``NATS_NKEY_SEED_FILE``
  (or ``NATS_CREDS_FILE``), the gateway's mounted Secret;
- ``FLEXINFER_MODEL_MAP``: a model map file (clients/model-map.md); without it the OpenAI ``model`` (the proxy's
  ``model_name``) is the Model's name in ``flexinfer-system``;
- ``FLEXINFER_THROTTLE_MS`` (default 0), ``FLEXINFER_EVENT_SOURCE`` (default ``litellm``).

The event is sent in the pre-call hook, before the upstream is called, so a running backfill is cancelled as early
as possible; the hook waits at most the publish timeout (1 s) and never fails a request. Requests with the
``X-FlexInfer-Workload-Class: background`` header, or a proxy run with ``FLEXINFER_WORKLOAD_CLASS=background``,
are never foreground.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from litellm.integrations.custom_logger import CustomLogger

from .emitter import ForegroundEmitter
from .model_map import ModelMap, request_is_background

log = logging.getLogger("flexinfer_gateway")


class FlexInferCallback(CustomLogger):  # type: ignore[misc]  # LiteLLM is not type-checked here
    def __init__(
        self,
        servers: Optional[str] = None,
        *,
        model_map: Optional[ModelMap] = None,
        source: Optional[str] = None,
        throttle_ms: Optional[int] = None,
        nkey_seed_file: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        super().__init__()
        self._env = dict(os.environ) if env is None else env
        self._servers = servers or self._env.get("FLEXINFER_NATS_URL") or self._env.get("NATS_URL")
        map_file = self._env.get("FLEXINFER_MODEL_MAP")
        # A bad map is a configuration error: raised here, when the proxy loads its callbacks.
        self.model_map = model_map or (ModelMap.load(map_file) if map_file else ModelMap())
        self._source = source or self._env.get("FLEXINFER_EVENT_SOURCE") or "litellm"
        self._throttle_ms = throttle_ms if throttle_ms is not None else int(self._env.get("FLEXINFER_THROTTLE_MS") or 0)
        self._seed = nkey_seed_file
        self.emitter: Optional[ForegroundEmitter] = None

    async def _emitter(self) -> Optional[ForegroundEmitter]:
        # Made on first use, inside the proxy's event loop.
        if self.emitter is None and self._servers:
            self.emitter = ForegroundEmitter(
                self._servers, nkey_seed_file=self._seed, source=self._source, throttle_ms=self._throttle_ms
            )
            await self.emitter.start()
        return self.emitter

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: Dict[str, Any], call_type: Any
    ) -> Optional[Dict[str, Any]]:
        try:
            request: Dict[str, Any] = data.get("proxy_server_request") or {}
            headers = request.get("headers") or {}
            if request_is_background(headers, self._env):
                return None
            route = urlsplit(str(request.get("url") or "")).path
            model = data.get("model")
            target = self.model_map.resolve(model=model if isinstance(model, str) else None, route=route, headers=headers)
            if target is None:
                return None
            emitter = await self._emitter()
            if emitter is not None:
                await emitter.emit(target.namespace, target.model)
        except Exception:  # noqa: BLE001 - never fail a request for the sake of backfill
            log.exception("FlexInfer callback failed")
        return None


#: What the proxy's config names: ``callbacks: flexinfer_gateway.litellm.proxy_handler_instance``.
proxy_handler_instance = FlexInferCallback()
