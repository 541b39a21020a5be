"""Which models a worker loads at start in explicit model control mode (pure).

Triton's ``--model-control-mode=explicit`` loads only the ``--load-model`` models at start
(``*``: every one). A mesh also has the fleet's desired state (``shared.fleet.control``): a model
loaded through the repository API stays loaded on a worker started later, and one unloaded
through it stays unloaded, whatever ``--load-model`` says (the fleet's last word wins). An
ensemble brings the models its steps use, as Triton loads an ensemble's composing models with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.fleet.control import DesiredState
from shared.model_config import ModelConfig
from shared.model_config.ensemble_graph import composing_models, is_ensemble

ALL = "*"


def start_set(
    configs: Mapping[str, ModelConfig],
    load_models: Iterable[str],
    states: Mapping[str, DesiredState],
) -> set[str]:
    """The names among ``configs`` (the models the repositories hold) to load at start."""
    asked = set(load_models)
    names = set(configs)
    chosen = set(names) if ALL in asked else names & asked
    chosen |= {name for name, state in states.items() if name in names and not state.unloaded}
    chosen -= {name for name, state in states.items() if state.unloaded}
    todo = sorted(chosen)
    while todo:
        config = configs[todo.pop()]
        if not is_ensemble(config):
            continue
        for step_model in composing_models(config):
            if step_model in names and step_model not in chosen:
                chosen.add(step_model)
                todo.append(step_model)
    return chosen


def missing(load_models: Iterable[str], known: Iterable[str]) -> list[str]:
    """The models ``--load-model`` names that no repository holds (each a load error)."""
    have = set(known)
    return sorted({name for name in load_models if name != ALL and name not in have})
