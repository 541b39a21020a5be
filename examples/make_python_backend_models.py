#!/usr/bin/env python3
"""Write the example models of Conch's Python-based backends (``examples/backends``).

    python examples/make_python_backend_models.py [REPO]   (default: examples/model_repository)

Each model is laid out as a model of Triton's vLLM backend is: a ``config.pbtxt`` that names the
backend (its inputs and outputs come from the backend's ``auto_complete_config``) and a version
directory holding only the model's data, ``1/model.json``; the code is the backend's
``model.py`` in the backend directory (``conch up --backend-directory``; Conch's
``examples/backends`` is searched by default).

- ``wordcount``: batched (dynamic batching, up to 64 rows), words split on whitespace;
- ``wordcount_csv``: the same backend, unbatched (``max_batch_size: 0``), fields split on ",";
- ``tiny_llm``: the generative example's tiny GPT (weights trained here, a few seconds on CPU,
  fixed seed, nothing downloaded) behind the ``tiny_llm`` backend, decoupled and streaming.
  Skipped, with a line saying so, when torch is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_REPOSITORY = HERE / "model_repository"
BACKENDS = HERE / "backends"

WORDCOUNT_CONFIG = """\
# Served by the Python-based backend examples/backends/wordcount/model.py
# (examples/make_python_backend_models.py); TEXT, COUNT and UNIQUE come from its auto-complete.
name: "wordcount"
backend: "wordcount"
max_batch_size: 64
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

WORDCOUNT_CSV_CONFIG = """\
# The wordcount backend again, unbatched, with its own 1/model.json (separator ",").
name: "wordcount_csv"
backend: "wordcount"
max_batch_size: 0
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# As the vLLM backend's sample model: the backend and an instance group, nothing else.
TINY_LLM_CONFIG = """\
# Served by the Python-based backend examples/backends/tiny_llm/model.py, as vLLM's models are by
# theirs (examples/make_python_backend_models.py); the engine's arguments are in 1/model.json.
name: "tiny_llm"
backend: "tiny_llm"
instance_group [ { count: 1 kind: KIND_MODEL } ]
"""

TINY_LLM_ARGS = {"model": ".", "max_sequences": 32, "token_budget": 512, "batching": "continuous"}


def _model(repository: Path, name: str, config: str, engine_args: dict[str, object]) -> Path:
    directory = repository / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "config.pbtxt").write_text(config)
    (directory / "1" / "model.json").write_text(json.dumps(engine_args, indent=2) + "\n")
    return directory


def write_wordcount(repository: Path) -> list[Path]:
    return [
        _model(repository, "wordcount", WORDCOUNT_CONFIG, {"separator": None, "lowercase": True}),
        _model(repository, "wordcount_csv", WORDCOUNT_CSV_CONFIG, {"separator": ","}),
    ]


def write_tiny_llm(repository: Path) -> Path | None:
    """None (and a line saying so) when torch is missing: the weights are trained with it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("tiny_llm: skipped (torch is not installed: pip install 'conch[torch]')")
        return None
    sys.path.insert(0, str(HERE))  # a script's sibling, not a package
    import make_generative_models

    from workers.generative import checkpoint

    model, vocab = make_generative_models.train(make_generative_models.CORPUS.read_text())
    directory = _model(repository, "tiny_llm", TINY_LLM_CONFIG, TINY_LLM_ARGS)
    checkpoint.save(model, vocab, directory / "1")
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repository", nargs="?", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument(
        "--skip-tiny-llm", action="store_true", help="only the wordcount models (no training)"
    )
    args = parser.parse_args()
    written = write_wordcount(args.repository)
    llm = None if args.skip_tiny_llm else write_tiny_llm(args.repository)
    for directory in [*written, llm] if llm else written:
        print(f"{directory.name}: -> {directory}", file=sys.stderr)


if __name__ == "__main__":
    main()
