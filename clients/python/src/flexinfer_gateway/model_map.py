"""Which Model a gateway request is for: the declarative model map shared by every client (clients/model-map.md).

Rules are tried in order, the first match wins; no rule matching, the OpenAI ``model`` is the Model's name in
``defaultNamespace``. A request the map cannot name maps to None: nothing is published.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .contract import WORKLOAD_CLASS_ENV, WORKLOAD_CLASS_HEADER, invalid_target, is_background

DEFAULT_NAMESPACE = "flexinfer-system"
MAX_RULES = 10_000

Headers = Mapping[str, Union[str, List[str], None]]


@dataclass(frozen=True)
class Target:
    namespace: str
    model: str


@dataclass(frozen=True)
class Rule:
    model: Optional[str] = None
    route: Optional[str] = None
    header: Optional[str] = None
    value: Optional[str] = None
    to: Optional[str] = None


@dataclass(frozen=True)
class ModelMap:
    default_namespace: str = DEFAULT_NAMESPACE
    rules: Tuple[Rule, ...] = ()

    @staticmethod
    def parse(value: Any) -> "ModelMap":
        """Checks a parsed map; raises ValueError naming the first thing wrong (at start, never per request)."""

        def fail(why: str) -> None:
            raise ValueError(f"model map: {why}")

        if not isinstance(value, dict):
            fail("not a JSON object")
        for key in value:
            if key not in ("defaultNamespace", "rules"):
                fail(f'unknown field "{key}"')
        ns = value.get("defaultNamespace", DEFAULT_NAMESPACE)
        bad = invalid_target(ns, "x")
        if bad:
            fail(f"defaultNamespace: {bad}")
        raw_rules = value.get("rules", [])
        if not isinstance(raw_rules, list):
            fail("rules is not a list")
        if len(raw_rules) > MAX_RULES:
            fail(f"more than {MAX_RULES} rules")
        rules: List[Rule] = []
        for i, r in enumerate(raw_rules):
            at = f"rules[{i}]"
            if not isinstance(r, dict):
                fail(f"{at} is not an object")
            for key in r:
                if key not in ("match", "to"):
                    fail(f'{at}: unknown field "{key}"')
            m = r.get("match")
            if not isinstance(m, dict):
                fail(f"{at}.match is missing")
            for key in m:
                if key not in ("model", "route", "header", "value"):
                    fail(f'{at}.match: unknown field "{key}"')
            if sum(1 for k in ("model", "route", "header") if m.get(k) is not None) != 1:
                fail(f"{at}.match needs exactly one of model, route, header")
            for k in ("model", "route", "header", "value"):
                if k in m and (not isinstance(m[k], str) or m[k] == ""):
                    fail(f"{at}.match.{k} is not a non-empty string")
            if "value" in m and "header" not in m:
                fail(f"{at}.match.value needs header")
            to = r.get("to")
            if to is None:
                if "header" not in m:
                    fail(f"{at}.to is missing (only a header rule may take its target from the header)")
            else:
                if not isinstance(to, str):
                    fail(f"{at}.to is not a string")
                parts = to.split("/")
                if len(parts) != 2:
                    fail(f"{at}.to {json.dumps(to)} is not namespace/model")
                why = invalid_target(parts[0], "x" if parts[1] == "*" else parts[1])
                if why:
                    fail(f"{at}.to: {why}")
            rules.append(Rule(m.get("model"), m.get("route"), m.get("header"), m.get("value"), to))
        return ModelMap(ns, tuple(rules))

    @staticmethod
    def load(path: str) -> "ModelMap":
        try:
            with open(path, encoding="utf-8") as f:
                parsed = json.load(f)
        except (OSError, ValueError) as err:
            raise ValueError(f"model map {path}: {err}") from err
        try:
            return ModelMap.parse(parsed)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err

    def resolve(
        self, *, model: Optional[str] = None, route: Optional[str] = None, headers: Optional[Headers] = None
    ) -> Optional[Target]:
        """The Model a request is for, or None when the map cannot name one. Never raises."""
        for rule in self.rules:
            if rule.model is not None and model != rule.model:
                continue
            if rule.route is not None and not (route or "").startswith(rule.route):
                continue
            if rule.header is not None:
                value = header(headers, rule.header)
                if value is None or (rule.value is not None and value != rule.value):
                    continue
                if rule.to is None:
                    return self._target(value.strip(), model)
            return self._target(rule.to or "", model)
        if model is None or "/" in model:
            return None
        return self._target(model, None)

    def _target(self, spec: str, request_model: Optional[str]) -> Optional[Target]:
        namespace, name = spec.split("/", 1) if "/" in spec else (self.default_namespace, spec)
        if name == "*":
            if request_model is None:
                return None
            name = request_model
        return None if invalid_target(namespace, name) else Target(namespace, name)


def header(headers: Optional[Headers], name: str) -> Optional[str]:
    if not headers:
        return None
    want = name.lower()
    for k, v in headers.items():
        if k.lower() == want:
            return v[0] if isinstance(v, list) else v
    return None


def request_is_background(headers: Optional[Headers], env: Optional[Dict[str, str]] = None) -> bool:
    """The ``X-FlexInfer-Workload-Class: background`` header, or FLEXINFER_WORKLOAD_CLASS=background where the
    gateway (or the workload calling it) runs: background requests are never foreground."""
    env = dict(os.environ) if env is None else env
    return is_background(header(headers, WORKLOAD_CLASS_HEADER)) or is_background(env.get(WORKLOAD_CLASS_ENV))
