"""A model's ``sequence_batching`` section as the typed spec the gateway and the workers act on.

The configuration keeps the section in Triton's JSON form (``ModelConfig.sequence_batching``);
this module reads it once per configuration into :class:`SequenceSpec`: the strategy and its
knobs, the slots each instance offers, the control inputs with their false/true values, the
CORRID control's datatype, and the implicit states. Triton's load-time rules for the section
live in ``shared/model_config/sequence_rules.py``; this module assumes they passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.model_config import ModelConfig
from shared.wire import datatypes

START, END, READY, CORRID = "START", "END", "READY", "CORRID"
_KINDS = {
    "CONTROL_SEQUENCE_START": START,
    "CONTROL_SEQUENCE_END": END,
    "CONTROL_SEQUENCE_READY": READY,
    "CONTROL_SEQUENCE_CORRID": CORRID,
}
DEFAULT_IDLE_US = 1_000_000


@dataclass(frozen=True)
class Control:
    """One control input: the tensor the sequence batcher fills for each request."""

    kind: str  # START | END | READY | CORRID
    name: str
    datatype: str  # KServe v2 name: INT32, FP32, BOOL; CORRID's own type
    false_value: Any = 0
    true_value: Any = 1


@dataclass(frozen=True)
class InitialState:
    datatype: str
    dims: list[int]
    zero_data: bool
    data_file: str
    name: str


@dataclass(frozen=True)
class StateSpec:
    """An implicit state: fed as ``input_name``, read back from ``output_name`` after each step."""

    input_name: str
    output_name: str
    datatype: str
    dims: list[int]
    initial: InitialState | None = None


@dataclass(frozen=True)
class SequenceSpec:
    strategy: str  # "direct" | "oldest"
    idle_us: int
    # Sequences one execution instance holds at once (Triton's sequence slots).
    slots: int
    # Requests per execution: max(1, max_batch_size).
    max_batch: int
    # Whether tensors carry a batch dimension (max_batch_size > 0).
    batched: bool
    controls: list[Control] = field(default_factory=list)
    corrid: Control | None = None
    states: list[StateSpec] = field(default_factory=list)
    queue_delay_us: int = 0
    min_slot_utilization: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()
    preserve_ordering: bool = False
    iterative: bool = False

    @property
    def string_ids(self) -> bool:
        """CORRID is TYPE_STRING: the model wants string sequence ids."""
        return self.corrid is not None and self.corrid.datatype == "BYTES"

    def control(self, kind: str) -> Control | None:
        for control in self.controls:
            if control.kind == kind:
                return control
        return self.corrid if kind == CORRID else None

    @property
    def state_outputs(self) -> list[str]:
        return [state.output_name for state in self.states]


_CACHE: dict[int, tuple[ModelConfig, SequenceSpec | None]] = {}


def sequence_spec(config: ModelConfig) -> SequenceSpec | None:
    """The config's sequence spec (None for a model without sequence batching), built once."""
    cached = _CACHE.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    spec = None if config.sequence_batching is None else _build(config)
    if len(_CACHE) > 256:  # configs are replaced on reload; keep the cache small
        _CACHE.clear()
    _CACHE[id(config)] = (config, spec)
    return spec


def _build(config: ModelConfig) -> SequenceSpec:
    raw: dict[str, Any] = config.sequence_batching or {}
    max_batch = max(1, config.max_batch_size)
    controls: list[Control] = []
    corrid: Control | None = None
    for control_input in raw.get("control_input", []):
        for item in control_input.get("control", []):
            kind = _KINDS.get(item.get("kind", "CONTROL_SEQUENCE_START"), START)
            if kind == CORRID:
                corrid = Control(CORRID, control_input["name"], _v2(item.get("data_type")))
            else:
                controls.append(_boolean(kind, control_input["name"], item))
    states = [_state(item) for item in raw.get("state", [])]
    oldest = raw.get("oldest")
    direct = raw.get("direct") or {}
    if oldest is not None:
        slots = int(oldest.get("max_candidate_sequences", 0)) or max_batch
        return SequenceSpec(
            strategy="oldest",
            idle_us=int(raw.get("max_sequence_idle_microseconds") or DEFAULT_IDLE_US),
            slots=slots,
            max_batch=max_batch,
            batched=config.max_batch_size > 0,
            controls=controls,
            corrid=corrid,
            states=states,
            queue_delay_us=int(oldest.get("max_queue_delay_microseconds", 0)),
            preferred_batch_sizes=tuple(int(s) for s in oldest.get("preferred_batch_size", [])),
            preserve_ordering=bool(oldest.get("preserve_ordering", False)),
            iterative=bool(raw.get("iterative_sequence", False)),
        )
    return SequenceSpec(
        strategy="direct",
        idle_us=int(raw.get("max_sequence_idle_microseconds") or DEFAULT_IDLE_US),
        slots=max_batch,
        max_batch=max_batch,
        batched=config.max_batch_size > 0,
        controls=controls,
        corrid=corrid,
        states=states,
        queue_delay_us=int(direct.get("max_queue_delay_microseconds", 0)),
        min_slot_utilization=float(direct.get("minimum_slot_utilization", 0.0)),
        iterative=bool(raw.get("iterative_sequence", False)),
    )


def _v2(config_type: str | None) -> str:
    return datatypes.from_config_name(config_type or "TYPE_UINT64").name


def _boolean(kind: str, name: str, item: dict[str, Any]) -> Control:
    if item.get("int32_false_true"):
        false, true = item["int32_false_true"]
        return Control(kind, name, "INT32", int(false), int(true))
    if item.get("fp32_false_true"):
        false, true = item["fp32_false_true"]
        return Control(kind, name, "FP32", float(false), float(true))
    false, true = item.get("bool_false_true") or [False, True]
    return Control(kind, name, "BOOL", bool(false), bool(true))


def _state(item: dict[str, Any]) -> StateSpec:
    initial = None
    for entry in item.get("initial_state", [])[:1]:
        initial = InitialState(
            datatype=_v2(entry.get("data_type")),
            dims=[int(d) for d in entry.get("dims", [])],
            zero_data=bool(entry.get("zero_data", False)),
            data_file=str(entry.get("data_file", "")),
            name=str(entry.get("name", "")),
        )
    return StateSpec(
        input_name=item["input_name"],
        output_name=item["output_name"],
        datatype=_v2(item.get("data_type")),
        dims=[int(d) for d in item.get("dims", [])],
        initial=initial,
    )
