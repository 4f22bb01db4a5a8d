"""A head kept after the pooling (train.keep_head: supervised SimCSE's `cls` pooler, its MLP applied at
evaluation too), as sentence-transformers keeps one: Dense modules after the Pooling module, each a Linear and
an activation. `dense_layers` cuts a training head into them for the export; `load_head` reads them back from
any sentence-transformers directory (ours, or a model such as distiluse's), without sentence-transformers.
torch is imported when a function runs: the exported model's readers import this module before their checks."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from pipeline.errors import InputError

if TYPE_CHECKING:
    from torch import nn

# sentence-transformers leaves a Dense's activation out of its config.json when it is the default, Tanh.
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"
ACTIVATIONS = ("Tanh", "ReLU", "Identity")  # torch.nn's classes of these names


def dense_layers(head: nn.Module) -> list[tuple[nn.Linear, nn.Module]]:
    """The head (projection_head's linear, tanh or mlp) as (Linear, activation) pairs, in order."""
    from torch import nn

    layers: list[tuple[nn.Linear, nn.Module]] = []
    for module in head if isinstance(head, nn.Sequential) else [head]:
        if isinstance(module, nn.Linear):
            layers.append((module, nn.Identity()))
        elif layers and isinstance(layers[-1][1], nn.Identity) and type(module).__name__ in ACTIVATIONS:
            layers[-1] = (layers[-1][0], module)
        else:
            raise ValueError(f"a {type(module).__name__} in the head has no sentence-transformers Dense form")
    return layers


def _dense(folder: str) -> nn.Sequential:
    import torch
    from safetensors.torch import load_file
    from torch import nn

    with open(f"{folder}/config.json", encoding="utf-8") as f:
        dense = json.load(f)
    name = dense.get("activation_function", DEFAULT_ACTIVATION)
    if not name.startswith("torch.nn.") or name.rsplit(".", 1)[-1] not in ACTIVATIONS:
        raise InputError(f"{folder}/config.json: activation {name!r} is not supported here ({', '.join(ACTIVATIONS)})")
    linear = nn.Linear(dense["in_features"], dense["out_features"], bias=dense.get("bias", True))
    weights = f"{folder}/model.safetensors"
    state = (
        load_file(weights) if os.path.isfile(weights) else torch.load(f"{folder}/pytorch_model.bin", weights_only=True)
    )
    linear.load_state_dict({k.removeprefix("linear."): v for k, v in state.items()})
    return nn.Sequential(linear, getattr(nn, name.rsplit(".", 1)[-1])())


def load_head(st_dir: str) -> nn.Sequential | None:
    """The Dense modules a sentence-transformers directory lists after its Pooling, in order; None if none."""
    from torch import nn

    modules = f"{st_dir}/modules.json"
    if not os.path.isfile(modules):
        return None
    with open(modules, encoding="utf-8") as f:
        listed = json.load(f)
    folders = [m["path"] for m in listed if m["type"].rsplit(".", 1)[-1] == "Dense"]
    return nn.Sequential(*(_dense(os.path.join(st_dir, p)) for p in folders)).eval() if folders else None
