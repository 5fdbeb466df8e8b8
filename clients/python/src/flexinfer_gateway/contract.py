"""The foreground-request contract as a gateway sees it (events/README.md, "The gateway contract").

The TypeScript and Go clients hold the same constants; clients/conformance/ keeps the three in step.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Mapping, Optional

EVENT_TYPE = "ai.flexinfer.foreground.request"
#: The foreground subject; foreground requests go on ``<it>.<namespace>.<model>`` (the model's newest request).
SUBJECT = "flexinfer.events.foreground.request"
WORKLOAD_CLASS_HEADER = "x-flexinfer-workload-class"
WORKLOAD_CLASS_ENV = "FLEXINFER_WORKLOAD_CLASS"

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def invalid_target(namespace: object, model: object) -> Optional[str]:
    """Why a namespace/model pair cannot be published, or None when it can."""
    if not isinstance(namespace, str) or len(namespace) > 63 or not _NAMESPACE.match(namespace):
        return f"namespace {json.dumps(namespace)} is not a Kubernetes namespace name (DNS-1123 label)"
    if not isinstance(model, str) or len(model) > 253 or not _NAME.match(model):
        return f"model {json.dumps(model)} is not a Kubernetes object name (DNS-1123 subdomain)"
    return None


def per_model_subject(namespace: str, model: str) -> str:
    return f"{SUBJECT}.{namespace}.{model}"


def is_background(workload_class: Optional[str]) -> bool:
    """Whether a request is background class: never foreground, never published."""
    return isinstance(workload_class, str) and workload_class.strip().lower() == "background"


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, as every client writes it: 2026-01-01T00:00:01.000Z."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def encode_foreground_request(
    *, namespace: str, model: str, id: str, time: datetime, source: str, extensions: Optional[Mapping[str, str]] = None
) -> bytes:
    """The structured-mode CloudEvent (JSON) of one foreground request."""
    event = {
        "specversion": "1.0",
        "id": id,
        "source": source,
        "type": EVENT_TYPE,
        "time": format_time(time),
        "datacontenttype": "application/json",
        "data": {"namespace": namespace, "model": model, "workloadClass": "foreground"},
    }
    if extensions:
        event.update(extensions)
    return json.dumps(event, separators=(",", ":")).encode()
