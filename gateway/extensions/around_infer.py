"""The protocol extensions around one inference, shared by REST and gRPC: shared memory for
inputs and outputs (``gateway.extensions.shared_memory``) and classification
(``gateway.extensions.classification``).

``prepare`` runs when the request is parsed (inputs read from their regions, output parameters
checked), ``finish`` when the reply is in (outputs written to their regions, classifications
made); the protocol adapters encode what ``finish`` returns. The data plane between them is
untouched by either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec
import redis.asyncio as aioredis

from gateway.core.request import ParsedRequest, check_binary
from gateway.extensions import classification, header_forwarding
from gateway.extensions.shared_memory import OutputTarget, Registration, SharedMemoryManager
from gateway.extensions.shm_params import ShmRef, shm_ref
from shared.fleet import labels
from shared.model_config import ModelConfig
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid


@dataclass
class Plan:
    """What ``finish`` has to do for one request."""

    shm_outputs: list[OutputTarget] = field(default_factory=list)
    classifications: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.shm_outputs and not self.classifications


EMPTY_PLAN = Plan()


@dataclass(frozen=True)
class Finished:
    outputs: list[Tensor]
    # Outputs written to shared memory: encoded without data.
    in_shared_memory: frozenset[str] = frozenset()


class InferExtensions:
    def __init__(
        self,
        r: aioredis.Redis,
        shared_memory: SharedMemoryManager,
        http_header_pattern: str = "",
        grpc_header_pattern: str = "",
    ):
        self._redis = r
        self.shared_memory = shared_memory
        self._forward = {
            False: header_forwarding.compile_pattern(http_header_pattern),
            True: header_forwarding.compile_pattern(grpc_header_pattern),
        }
        # model -> (the config the labels were read for, the labels)
        self._labels: dict[str, tuple[ModelConfig, dict[str, list[str]]]] = {}

    async def prepare(
        self, parsed: ParsedRequest, headers: Mapping[str, str] | None = None, grpc: bool = False
    ) -> Plan:
        """Forward the headers the forward pattern names as parameters; read shared memory
        inputs into the request; check the outputs' parameters."""
        if headers:
            header_forwarding.forward(self._forward[grpc], headers.items(), parsed.parameters)
        classifications: dict[str, int] = {}
        out_refs: dict[str, ShmRef] = {}
        for output in parsed.outputs:
            params = output.parameters
            if not params:
                continue
            count = classification.requested_count(output.name, params)
            ref = shm_ref("output", output.name, params)
            if ref is not None:
                if count:
                    raise invalid(
                        "Output can't set both 'shared_memory_region' and 'classification'"
                    )
                if params.get("binary_data") is True:
                    raise invalid("Output can't set both 'shared_memory_region' and 'binary_data'")
                out_refs[output.name] = ref
            elif count:
                classifications[output.name] = count
        regions = {ref.region for ref in parsed.shm_inputs.values()}
        regions |= {ref.region for ref in out_refs.values()}
        if not regions and not classifications:
            return EMPTY_PLAN
        plan = Plan(classifications=classifications)
        if regions:
            found = await self.shared_memory.registrations(regions)
            if parsed.shm_inputs:
                _fill_inputs(parsed, self.shared_memory, found)
            plan.shm_outputs = [
                self.shared_memory.check_output(name, ref, found[ref.region])
                for name, ref in out_refs.items()
            ]
        return plan

    async def finish(
        self, plan: Plan, config: ModelConfig | None, outputs: list[Tensor]
    ) -> Finished:
        """``config`` is the model's (None if it went away meanwhile); only a classification
        reads it."""
        if plan.empty:
            return Finished(outputs)
        if plan.classifications:
            if config is None:
                raise invalid("the model was unloaded while the request ran; no classification")
            table = await self._labels_of(config)
            batched = config.max_batch_size > 0
            outputs = [
                classification.classify(t, plan.classifications[t.name], batched, table.get(t.name))
                if t.name in plan.classifications
                else t
                for t in outputs
            ]
        if not plan.shm_outputs:
            return Finished(outputs)
        by_name = {t.name: t.data for t in outputs}
        targets = [t for t in plan.shm_outputs if t.output in by_name]
        await self.shared_memory.write(targets, by_name)
        return Finished(outputs, frozenset(t.output for t in targets))

    async def _labels_of(self, config: ModelConfig) -> dict[str, list[str]]:
        cached = self._labels.get(config.name)
        if cached is not None and cached[0] is config:
            return cached[1]
        found = await labels.read(self._redis, config.name)
        self._labels[config.name] = (config, found)
        return found


def _fill_inputs(
    parsed: ParsedRequest, manager: SharedMemoryManager, found: dict[str, Registration]
) -> None:
    """Replace the placeholder of each shared memory input with the region's bytes."""
    filled: list[Tensor] = []
    for tensor in parsed.inputs:
        ref = parsed.shm_inputs.get(tensor.name)
        if ref is None:
            filled.append(tensor)
            continue
        data = manager.read(ref, found[ref.region])
        check_binary(tensor.name, tensor.datatype, tensor.shape, data)
        filled.append(msgspec.structs.replace(tensor, data=data))
    parsed.inputs = filled
    parsed.shm_inputs = {}
