"""Foreground-request events from an LLM gateway to ModelBackfill (NATS JetStream). Contract: events/README.md."""

from .contract import (
    EVENT_TYPE,
    SUBJECT,
    WORKLOAD_CLASS_ENV,
    WORKLOAD_CLASS_HEADER,
    encode_foreground_request,
    invalid_target,
    is_background,
    per_model_subject,
)
from .emitter import EmitterStats, ForegroundEmitter, ForegroundRequest, Outcome, connection_settings
from .model_map import ModelMap, Target, request_is_background
from .sync import SyncForegroundEmitter

__all__ = [
    "EVENT_TYPE",
    "SUBJECT",
    "WORKLOAD_CLASS_ENV",
    "WORKLOAD_CLASS_HEADER",
    "EmitterStats",
    "ForegroundEmitter",
    "ForegroundRequest",
    "ModelMap",
    "Outcome",
    "SyncForegroundEmitter",
    "Target",
    "connection_settings",
    "encode_foreground_request",
    "invalid_target",
    "is_background",
    "per_model_subject",
    "request_is_background",
]
