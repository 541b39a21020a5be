"""An ensemble's steps as a graph over tensor names, and its validation at load. Pure.

A step runs as soon as every ensemble tensor its ``input_map`` names exists; the ensemble's own
inputs exist from the start, and a step's ``output_map`` makes its tensors exist once it
answered. Independent branches therefore run in parallel. Validation refuses, with one line each
(Triton's texts where Triton has them): no step, a step without a model or maps, an unknown
composing model, an input or output a composing model does not have, a tensor produced twice, a
tensor or ensemble output never produced, and a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.model_config import ModelConfig
from shared.wire.errors import ConchError, ErrorCode

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True)
class Step:
    index: int
    model: str
    # -1: the latest ready version of the composing model.
    version: int
    # Composing model input -> ensemble tensor, and composing model output -> ensemble tensor.
    input_map: dict[str, str]
    output_map: dict[str, str]

    @property
    def needs(self) -> frozenset[str]:
        return frozenset(self.input_map.values())

    @property
    def label(self) -> str:
        return f"step {self.index} (model '{self.model}')"


def is_ensemble(config: ModelConfig) -> bool:
    return config.platform == ENSEMBLE_PLATFORM


def steps_of(config: ModelConfig) -> list[Step]:
    raw = (config.ensemble_scheduling or {}).get("step", [])
    return [
        Step(
            index=i,
            model=str(step.get("model_name", "")),
            version=int(step.get("model_version", -1)),
            input_map={str(k): str(v) for k, v in (step.get("input_map") or {}).items()},
            output_map={str(k): str(v) for k, v in (step.get("output_map") or {}).items()},
        )
        for i, step in enumerate(raw)
    ]


def composing_models(config: ModelConfig) -> list[str]:
    """The models an ensemble's steps use, in step order, without repeats."""
    return list(dict.fromkeys(step.model for step in steps_of(config)))


def runnable(steps: Iterable[Step], available: Iterable[str], done: Iterable[int]) -> list[Step]:
    """The steps not answered yet whose inputs all exist."""
    have, finished = set(available), set(done)
    return [s for s in steps if s.index not in finished and s.needs <= have]


def _invalid(message: str) -> ConchError:
    return ConchError(ErrorCode.INVALID_ARG, message)


def validate(config: ModelConfig, composing: Mapping[str, ModelConfig | None]) -> list[Step]:
    """The ensemble's steps, or a ConchError with one line saying what is wrong.

    ``composing`` holds the configs of the repository's models (None where the model exists but
    its config is not known yet); a composing model's inputs and outputs are checked where its
    config lists them.
    """
    name = config.name
    steps = steps_of(config)
    if not steps:
        raise _invalid(f"must specify 'step' for ensemble '{name}'")
    produced: dict[str, int] = {spec.name: -1 for spec in config.inputs}
    for step in steps:
        where = f"step {step.index} of ensemble '{name}'"
        if not step.model:
            raise _invalid(f"must specify 'model_name' in {where}")
        if step.model == name:
            raise _invalid(f"ensemble {name} can't contain itself")
        if not step.input_map:
            raise _invalid(f"must specify 'input_map' in {where}")
        if not step.output_map:
            raise _invalid(f"must specify 'output_map' in {where}")
        if step.model not in composing:
            raise _invalid(
                f"ensemble '{name}' {step.label}: composing model '{step.model}' is not in "
                "the model repository"
            )
        _check_supported(name, step, composing[step.model])
        _check_mapping(name, step, composing[step.model])
        for tensor in step.output_map.values():
            if tensor in produced:
                raise _invalid(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {step.index}"
                )
            produced[tensor] = step.index
    _check_flow(name, config, steps, produced)
    return steps


def _check_supported(name: str, step: Step, model: ModelConfig | None) -> None:
    """Refused until built, never served wrongly: a step's request goes through the composing
    model's queue, which sequence models and decoupled models do not have."""
    if model is None:
        return
    if model.sequence_batching is not None:
        missing = "sequence models in ensembles are not supported yet"
    elif (model.json.get("model_transaction_policy") or {}).get("decoupled"):
        missing = "decoupled models in ensembles are not supported yet (they come with streaming)"
    else:
        return
    raise ConchError(ErrorCode.UNSUPPORTED, f"ensemble '{name}' {step.label}: {missing}")


def _check_mapping(name: str, step: Step, model: ModelConfig | None) -> None:
    if model is None or not (model.inputs or model.outputs):
        return  # auto-completed at load: its tensors are checked when the step runs
    inputs, outputs = set(model.input_names), set(model.output_names)
    for model_input, tensor in step.input_map.items():
        if model_input not in inputs:
            raise _invalid(
                f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing "
                f"input {model_input} in model {step.model}"
            )
    for spec in model.inputs:
        if spec.name not in step.input_map and not spec.optional:
            raise _invalid(
                f"in ensemble {name}, input {spec.name} in model {step.model} is not mapped "
                "to any ensemble tensors"
            )
    for model_output, tensor in step.output_map.items():
        if model_output not in outputs:
            raise _invalid(
                f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing "
                f"output {model_output} in model {step.model}"
            )


def _check_flow(
    name: str, config: ModelConfig, steps: list[Step], produced: dict[str, int]
) -> None:
    """Every step's inputs are produced somewhere; the steps can all run (no cycle); every
    ensemble output is written."""
    for step in steps:
        for tensor in sorted(step.needs):
            if tensor not in produced:
                raise _invalid(
                    f"ensemble tensor '{tensor}' used by {step.label} of ensemble '{name}' is "
                    "not an ensemble input nor produced by any step"
                )
    available = {spec.name for spec in config.inputs}
    done: set[int] = set()
    while ready := runnable(steps, available, done):
        for step in ready:
            done.add(step.index)
            available.update(step.output_map.values())
    stuck = [s for s in steps if s.index not in done]
    if stuck:
        cycle = ", ".join(s.label for s in stuck)
        raise _invalid(f"ensemble '{name}' has a cycle: {cycle} wait on each other's outputs")
    for spec in config.outputs:
        if spec.name not in available:
            raise _invalid(f"output '{spec.name}' for ensemble '{name}' is not written")
