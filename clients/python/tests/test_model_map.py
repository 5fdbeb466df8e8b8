"""The shared model-map conformance cases (clients/conformance/model-map.json)."""

import pytest
from conftest import load

from flexinfer_gateway import ModelMap, request_is_background

DATA = load("model-map.json")


@pytest.mark.parametrize("case", DATA["cases"], ids=[c["name"] for c in DATA["cases"]])
def test_resolves(case: dict) -> None:
    m = ModelMap.parse(case["map"])
    got = m.resolve(**case["request"])
    want = case["expect"]
    assert (None if got is None else {"namespace": got.namespace, "model": got.model}) == want


@pytest.mark.parametrize("case", DATA["invalid"], ids=[c["name"] for c in DATA["invalid"]])
def test_refuses(case: dict) -> None:
    with pytest.raises(ValueError) as err:
        ModelMap.parse(case["map"])
    assert case["error"] in str(err.value)


@pytest.mark.parametrize("case", DATA["workloadClass"], ids=[c["name"] for c in DATA["workloadClass"]])
def test_workload_class(case: dict) -> None:
    env = {} if case["env"] is None else {"FLEXINFER_WORKLOAD_CLASS": case["env"]}
    assert request_is_background(case["headers"], env) is case["background"]
