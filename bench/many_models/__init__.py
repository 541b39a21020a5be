"""Thousands of models on a small fleet (issue 31): a Zipf request mix over a repository of
many small ONNX models, loaded on demand, against the hottest ones all pre-loaded.

    python -m bench.many_models [--mode on_demand|warm|both] [--models 1000] [--hot 50]
        [--workers 2] [--model-memory-budget 40MiB] [--concurrency 32] [--duration 60]

The repository (``repository.py``): ``m0000``..``m0999``, the same small MLP with its own
weights each, written once under /tmp/conch-bench/many-models-N. Each mode starts its own
``conch up`` (``mesh.py``): ``on_demand`` (``--model-control-mode on_demand
--model-memory-budget B``, nothing loaded) or ``warm`` (explicit mode, ``--load-model`` of the
``--hot`` hottest; the mix cut to them). The load generator (``client.py``) is a closed loop
of keep-alive HTTP connections in separate processes, each request's model drawn from a Zipf
law with s = 1.1 over the ranks (rank 1, the hottest, is ``m0000``; fixed seed). Every
request is recorded; ``timeline.py`` decides which found their model loaded (cold: the first
request of a model, those sent while its load was under way, and those after the repository
index showed it evicted). Reported (``report.py``): throughput, hit ratio, cold-start and warm
p50/p99, loads per minute, the workers' peak resident memory (summed RSS, sampled). The table
is printed and written to bench-results/many_models-STAMP.md; the raw numbers (settings, every
request, the memory samples) to bench-results/many_models-STAMP.json.
"""
