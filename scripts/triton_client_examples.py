#!/usr/bin/env python3
"""Run NVIDIA's Triton client examples unchanged against Conch and print a table of outcomes.

    python scripts/triton_client_examples.py EXAMPLES_DIR [--http-port 8000 --grpc-port 8001]

EXAMPLES_DIR is ``src/python/examples`` of a checkout of triton-inference-server/client (it is
not part of this project). The script writes the example model repository with the project's
generators, starts ``conch up`` the way a Triton user would start ``tritonserver`` for these
examples (``--server-name triton --allow-client-shm --cache-config local,size=64M``, repository
API without the admin token), runs every example with its default arguments except the server
address, and reports each as passed, failed (with the last line it printed) or not applicable
(the reason). The model-control examples count the repository index (7 entries over HTTP, 8
over gRPC, as in Triton's test setup) and unload ``simple``: each runs against a mesh of its own
whose repository has that many models. ``memory_growth_test.py`` has its addresses built in
(localhost:8000 and 8001): it runs only when those are the ports used. The gateway's gRPC port
is opened with SO_REUSEPORT: make sure no other mesh on the machine uses the same one, or their
gRPC connections mix.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Not applicable on a CPU-only mesh without data sets, and why.
NOT_APPLICABLE = {
    "simple_http_cudashm_client.py": "CUDA shared memory: needs a GPU (and cuda-python)",
    "simple_grpc_cudashm_client.py": "CUDA shared memory: needs a GPU (and cuda-python)",
    "image_client.py": "image model (densenet/inception) and image files; needs a data set",
    "grpc_image_client.py": "image model (densenet/inception) and image files; needs a data set",
    "ensemble_image_client.py": "image ensemble (preprocess_inception_ensemble) and images",
    "grpc_client.py": "densenet_onnx image model; needs a data set",
}
# Examples that exit 0 whether or not their last check held: the marker proves it did.
PASS_MARKERS = {
    "grpc_explicit_int_content_client.py": "PASS: explicit int",
    "grpc_explicit_int8_content_client.py": "PASS: explicit int8",
    "grpc_explicit_byte_content_client.py": "PASS: explicit string",
    "simple_http_model_control.py": "PASS: model control",
    "simple_grpc_model_control.py": "PASS: model control",
}
MODEL_CONTROL = {"simple_http_model_control.py": 7, "simple_grpc_model_control.py": 8}
PYTHON_MODELS = [
    "simple_string",
    "simple_identity",
    "repeat_int32",
    "square_int32",
    "simple_string_dyna_sequence",
]
# The model-control meshes take the first ones of this list (keep its head in this order).
ONNX_MODELS = [
    "simple",
    "simple_int8",
    "custom_identity_int32",
    "mlp",
    "add_sub",
    "mlp_cached",
    "simple_sequence",
    "simple_dyna_sequence",
]


def write_repository(path: Path, onnx: list[str], python: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import make_backend_models
        import make_models
    finally:
        sys.path.pop(0)
    make_models.write_repository(path, [m for m in onnx if m in make_models.BUILDERS])
    available = [m for m in python if m in make_backend_models.BUILDERS]
    make_backend_models.write_repository(path, available)


class Mesh:
    """`conch up` on the given ports, stopped with SIGTERM."""

    def __init__(self, repository: Path, http_port: int, grpc_port: int):
        env = {**os.environ, "CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN": "false"}
        env.pop("CONCH_REDIS_URL", None)
        argv = [sys.executable, "-m", "conch", "up", "--model-repository", str(repository)]
        argv += ["--http-port", str(http_port), "--grpc-port", str(grpc_port), "--gateways", "2"]
        argv += ["--server-name", "triton", "--allow-client-shm"]
        argv += ["--cache-config", "local,size=64M", "--log-format", "text"]
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - open while the mesh runs
            prefix="conch-up-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"conch up exited; see {self.log.name}")
            if "Conch is ready at" in Path(self.log.name).read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise TimeoutError(f"conch up not ready in {timeout_s} s; see {self.log.name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=60)


def run(example: Path, http: str, grpc: str, timeout_s: float) -> tuple[str, str]:
    name = example.name
    url = grpc if "grpc" in name else http
    argv = [sys.executable, name]
    if name == "memory_growth_test.py":
        argv += ["-r", "20"]
    elif name == "reuse_infer_objects_client.py":
        argv += ["-u", http]
    else:
        argv += ["-u", url]
    try:
        done = subprocess.run(
            argv, cwd=example.parent, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return "fails", f"no answer within {timeout_s:.0f} s"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    last = lines[-1][:160] if lines else ""
    marker = PASS_MARKERS.get(name)
    if done.returncode == 0 and (marker is None or marker in done.stdout):
        return "passes", last
    return "fails", last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", type=Path, help="client repo's src/python/examples")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    examples = sorted(args.examples.glob("*.py"))
    http, grpc = f"localhost:{args.http_port}", f"localhost:{args.grpc_port}"
    results: dict[str, tuple[str, str]] = {}
    for example in examples:
        if example.name in NOT_APPLICABLE:
            results[example.name] = ("not applicable", NOT_APPLICABLE[example.name])
        elif example.name == "memory_growth_test.py" and (args.http_port, args.grpc_port) != (
            8000,
            8001,
        ):
            results[example.name] = ("not run", "its addresses are localhost:8000 and 8001")
    work = Path(tempfile.mkdtemp(prefix="conch-examples-"))
    try:
        write_repository(work / "all", ONNX_MODELS, PYTHON_MODELS)
        mesh = Mesh(work / "all", args.http_port, args.grpc_port)
        try:
            mesh.wait_ready()
            for example in examples:
                if example.name not in results and example.name not in MODEL_CONTROL:
                    results[example.name] = run(example, http, grpc, args.timeout)
                    print(f"{example.name}: {results[example.name][0]}", flush=True)
        finally:
            mesh.stop()
        for name, count in MODEL_CONTROL.items():
            repository = work / f"index{count}"
            write_repository(
                repository, ONNX_MODELS[: count - 2], ["simple_string", "simple_identity"]
            )
            mesh = Mesh(repository, args.http_port, args.grpc_port)
            try:
                mesh.wait_ready()
                results[name] = run(args.examples / name, http, grpc, args.timeout)
                print(f"{name}: {results[name][0]}", flush=True)
            finally:
                mesh.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| example | outcome | detail |\n|---|---|---|")
    for name in sorted(results):
        outcome, detail = results[name]
        print(f"| `{name}` | {outcome} | {re.sub(r'[|]', '/', detail)} |")
    return 0 if all(o != "fails" for o, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
