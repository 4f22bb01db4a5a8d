"""The flows' parameters are described once (flows.parameters): every flow's deployment schema describes each of
its parameters, a parameter two flows share in the same words, and `until` by the stages of its own flow."""

from __future__ import annotations

from prefect.utilities.callables import parameter_schema

import flows.pipeline_flows as flows
from pipeline import registry

FLOWS = {"data": flows.data_flow, "train": flows.train_flow, "evaluate": flows.evaluate_flow}
EVERY = {**FLOWS, "full-pipeline": flows.full_pipeline}


def described(flow) -> dict[str, str]:
    return {name: p.get("description", "") for name, p in parameter_schema(flow.fn).properties.items()}


def test_every_parameter_of_every_flow_is_described_and_a_shared_one_alike():
    said = {name: described(flow) for name, flow in EVERY.items()}
    for name, parameters in said.items():
        assert all(parameters.values()), (name, parameters)
        assert parameters.keys() == set(EVERY[name].parameters.properties), name  # as Prefect's own schema has them
    for parameter in ("config", "corpus", "eval_data", "artifacts", "overrides", "resolved"):
        assert len({p[parameter] for p in said.values() if parameter in p}) == 1, parameter
    assert "cpipe run --set" in said["data"]["overrides"] and "evaluate.data" in said["data"]["eval_data"]


def test_until_names_the_stages_of_its_own_flow():
    for name, flow in FLOWS.items():
        stages = [s.name for s in registry.in_flow(name)]
        assert described(flow)["until"] == f"Stop after this stage ({', '.join(stages)}); default {stages[-1]}."
    assert described(flows.full_pipeline)["until"].startswith(f"Stop after this stage ({', '.join(registry.NAMES)})")
