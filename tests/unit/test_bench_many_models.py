"""The many-models benchmark's pure parts: the Zipf mix, the cold/warm timeline, the figures,
the repository generator, conch up's command line per mode, and the client against a stub."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from bench.many_models import mesh, repository, zipf
from bench.many_models.client import LoadPlan, LoadRun, request_parts
from bench.many_models.report import SOCKET_ERROR, TIMEOUT, markdown_table, percentile_ms, summarize
from bench.many_models.timeline import IndexSample, classify
from shared.model_config.parsing import parse_pbtxt


# -- the Zipf mix ---------------------------------------------------------------------------
def test_pmf_is_the_finite_zipf_law() -> None:
    p = zipf.pmf(1000, 1.1)
    assert p.sum() == pytest.approx(1.0)
    harmonic = sum(k**-1.1 for k in range(1, 1001))
    assert p[0] == pytest.approx(1 / harmonic)
    assert p[0] / p[9] == pytest.approx(10**1.1)  # rank 1 against rank 10
    assert np.all(np.diff(p) < 0)  # rank 1 the hottest
    with pytest.raises(ValueError, match="at least one rank"):
        zipf.pmf(0)


def test_samples_follow_the_distribution() -> None:
    n, draws = 1000, 400_000
    ranks = zipf.ZipfSampler(n, seed=7).draw(draws)
    assert ranks.min() >= 0 and ranks.max() < n
    counts = np.bincount(ranks, minlength=n)
    expected = zipf.pmf(n) * draws
    # Chi-square over bins of at least ~200 expected draws: the head rank by rank, the tail
    # pooled. Its 0.999 quantile for ~60 degrees of freedom is about 100.
    edges = [0]
    while edges[-1] < n:
        end = edges[-1] + 1
        while end < n and expected[edges[-1] : end].sum() < 200:
            end += 1
        edges.append(end)
    observed = np.add.reduceat(counts, edges[:-1])
    wanted = np.add.reduceat(expected, edges[:-1])
    chi2 = float(((observed - wanted) ** 2 / wanted).sum())
    assert chi2 < 2.0 * (len(wanted) - 1) + 40, (chi2, len(wanted))
    # The head: rank 1 takes 1/H(1000, 1.1), about 17.5% of the requests.
    assert counts[0] / draws == pytest.approx(zipf.pmf(n)[0], rel=0.02)


def test_same_seed_same_mix_and_one_by_one_equals_blocks() -> None:
    a = zipf.ZipfSampler(100, seed=[1, 0, 3], block=16)
    b = zipf.ZipfSampler(100, seed=[1, 0, 3], block=16)
    assert [a.next() for _ in range(40)] == [b.next() for _ in range(40)]
    c = zipf.ZipfSampler(100, seed=[1, 0, 4], block=16)
    assert [c.next() for _ in range(40)] != [b.next() for _ in range(40)]
    ones = zipf.ZipfSampler(50, seed=3, block=10)
    assert [ones.next() for _ in range(10)] == zipf.ZipfSampler(50, seed=3).draw(10).tolist()


def test_the_warm_mix_is_the_same_law_cut_at_its_models() -> None:
    full, cut = zipf.pmf(1000), zipf.pmf(50)
    np.testing.assert_allclose(cut, full[:50] / full[:50].sum())


# -- the timeline: which requests found their model loaded -----------------------------------
def _classify(rows: list[tuple[int, float, float, bool]], **kw):  # type: ignore[no-untyped-def]
    models = np.array([r[0] for r in rows], dtype=np.int64)
    sent = np.array([r[1] for r in rows], dtype=np.float64)
    latency = np.array([r[2] for r in rows], dtype=np.float64)
    ok = np.array([r[3] for r in rows], dtype=np.bool_)
    return classify(models, sent, latency, ok, **kw)


def test_first_request_and_those_during_its_load_are_cold() -> None:
    result = _classify(
        [
            (3, 0.0, 2.0, True),  # first: loads model 3, answered at 2.0
            (3, 0.5, 1.6, True),  # sent while the load was under way: cold too
            (3, 2.0, 0.1, True),  # sent as the first answer came: warm
            (4, 1.0, 0.5, False),  # failed: model 4 never known loaded
            (4, 3.0, 0.5, True),  # so this is cold
            (4, 3.6, 0.1, True),
        ]
    )
    assert result.cold.tolist() == [True, True, False, True, True, False]
    assert (result.loads, result.evictions) == (2, 0)


def test_preloaded_models_are_warm_from_the_start() -> None:
    result = _classify([(0, 0.0, 0.1, True), (1, 0.0, 0.1, True)], preloaded=[0])
    assert result.cold.tolist() == [False, True]
    assert result.loads == 1  # only model 1 loaded during the run


def test_an_eviction_the_index_shows_makes_the_next_request_cold() -> None:
    result = _classify(
        [(5, 0.0, 1.0, True), (5, 2.0, 0.1, True), (5, 4.0, 1.0, True), (5, 6.0, 0.1, True)],
        samples=[
            IndexSample(0.5, frozenset()),  # loading
            IndexSample(1.5, frozenset({5})),
            IndexSample(3.0, frozenset()),  # evicted
            IndexSample(4.5, frozenset()),  # reloading
        ],
    )
    assert result.cold.tolist() == [True, False, True, False]
    assert (result.loads, result.evictions) == (2, 1)


def test_a_ready_sample_before_any_answer_makes_requests_warm() -> None:
    result = _classify(
        [(7, 0.0, 3.0, True), (7, 1.0, 2.5, True)], samples=[IndexSample(0.9, frozenset({7}))]
    )
    assert result.cold.tolist() == [True, False]
    assert result.loads == 1  # the sample's load; the answers find it loaded


# -- the figures ------------------------------------------------------------------------------
def test_percentiles_take_the_lower_rank_in_ms() -> None:
    latency = np.arange(1, 101, dtype=np.float64) / 1000  # 1..100 ms
    assert percentile_ms(latency, 0.5) == 50.0
    assert percentile_ms(latency, 0.99) == 99.0
    assert percentile_ms(latency[::-1].copy(), 0.0) == 1.0
    assert percentile_ms(np.array([], dtype=np.float64), 0.5) is None


def test_summary_figures() -> None:
    models = np.array([0, 0, 1, 1, 2, 0], dtype=np.int64)
    latency = np.array([0.5, 0.01, 0.4, 0.02, 9.0, 0.03])
    status = np.array([200, 200, 200, 200, TIMEOUT, 503], dtype=np.int64)
    cold = np.array([True, False, True, False, True, False])
    s = summarize(models, latency, status, cold, 30.0, 2, 1, 300 * 2**20)
    assert (s["requests"], s["answered"], s["errors"]) == (6, 4, 2)
    assert s["outcomes"] == {"timeout": 1, "200": 4, "503": 1}
    assert s["throughput_rps"] == pytest.approx(4 / 30, abs=0.05)
    assert s["hit_ratio"] == 0.5  # 3 of 6 sent found their model loaded
    assert (s["cold_p50_ms"], s["cold_p99_ms"]) == (400.0, 400.0)  # the timeout is no latency
    # The 503 is no latency either; of 10 and 20 ms, p99 is the lower rank's.
    assert (s["warm_p50_ms"], s["warm_p99_ms"]) == (10.0, 10.0)
    assert s["loads_per_min"] == 4.0
    assert s["peak_worker_rss_mib"] == 300.0
    assert s["models_requested"] == 3
    assert (
        summarize(models[:0], latency[:0], status[:0], cold[:0], 1.0, 0, 0, 0)["hit_ratio"] is None
    )
    assert SOCKET_ERROR not in status


def test_table_has_a_column_per_run_and_a_row_per_figure() -> None:
    models = np.array([0, 1], dtype=np.int64)
    s = summarize(models, np.array([0.2, 0.01]), np.array([200, 200], dtype=np.int64),
                  np.array([True, False]), 10.0, 1, 0, 2**30)  # fmt: skip
    warm = summarize(models, np.array([0.01, 0.01]), np.array([200, 200], dtype=np.int64),
                     np.array([False, False]), 10.0, 0, 0, 2**29)  # fmt: skip
    table = markdown_table(
        [{"label": "on_demand", "summary": s}, {"label": "warm", "summary": warm}]
    )
    lines = table.splitlines()
    assert lines[0] == "| figure | on_demand | warm |"
    assert "| hit ratio (requests that found their model loaded) | 50.0% | 100.0% |" in lines
    assert "| cold-start p50 / p99 (ms) | 200.00 / 200.00 | - / - |" in lines
    assert "| peak resident memory, workers (MiB) | 1,024.0 | 512.0 |" in lines
    assert "| loads per minute | 6.0 (1 loads) | 0.0 (0 loads) |" in lines


# -- the repository ---------------------------------------------------------------------------
def test_the_generator_writes_n_distinct_loadable_models(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    assert repository.write(tmp_path, 12, queue_delay_us=100) == 12
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"m{i:04d}" for i in range(12)]
    digests = {hashlib.sha256((tmp_path / n / "1" / "model.onnx").read_bytes()).hexdigest()
               for n in names}  # fmt: skip
    assert len(digests) == 12
    size = (tmp_path / "m0000" / "1" / "model.onnx").stat().st_size
    assert 200_000 < size < 800_000  # "a few hundred KB"
    config = parse_pbtxt((tmp_path / "m0007" / "config.pbtxt").read_text())
    assert config.name == "m0007" and config.max_batch_size == repository.MAX_BATCH_SIZE
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    x = np.random.default_rng(0).standard_normal((3, repository.DIMS[0])).astype(np.float32)
    outputs = []
    for name in ("m0000", "m0011"):
        session = ort.InferenceSession(str(tmp_path / name / "1" / "model.onnx"))
        (y,) = session.run(None, {repository.INPUT: x})
        assert y.shape == (3, repository.DIMS[-1])
        outputs.append(y)
    assert not np.allclose(outputs[0], outputs[1])
    assert repository.write(tmp_path, 12, queue_delay_us=100) == 0  # kept
    assert repository.write(tmp_path, 13, queue_delay_us=0) == 13  # another config: rewritten


def test_a_thousand_models_take_seconds(tmp_path: Path) -> None:
    began = time.monotonic()
    repository.write(tmp_path, 150)
    assert (time.monotonic() - began) * 1000 / 150 < 30.0  # 1,000 in well under 30 s


# -- conch up per mode ----------------------------------------------------------------------
def _plan(mode: str, pinned: int) -> mesh.MeshPlan:
    return mesh.MeshPlan(mode, Path("/r"), 2, pinned, "1GiB", 8000, 8001, "t", ("--x", "1"))


def test_warm_mode_loads_the_hottest_explicitly() -> None:
    argv = mesh.up_argv(_plan("warm", 50))
    assert argv[argv.index("--model-control-mode") + 1] == "explicit"
    loaded = [argv[i + 1] for i, a in enumerate(argv) if a == "--load-model"]
    assert loaded == [f"m{i:04d}" for i in range(50)]
    assert argv[argv.index("--workers-per-backend") + 1] == "2"
    assert "--model-memory-budget" not in argv
    assert argv[-2:] == ["--x", "1"]


def test_on_demand_mode_passes_the_budget() -> None:
    argv = mesh.up_argv(_plan("on_demand", 0))
    assert argv[argv.index("--model-control-mode") + 1] == "on_demand"
    assert argv[argv.index("--model-memory-budget") + 1] == "1GiB"
    assert "--load-model" not in argv
    with pytest.raises(ValueError, match="expected one of on_demand, warm"):
        mesh.up_argv(_plan("lazy", 0))


# -- the client against a stub server --------------------------------------------------------
class _Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects

    def do_POST(self) -> None:  # http.server's name for it
        self.rfile.read(int(self.headers["Content-Length"]))
        model = self.path.split("/")[3]
        status = 503 if model == "m0002" else 200
        body = b'{"outputs":[]}'
        self.send_response(status)
        if model == "m0003":  # the server closes: the client reconnects, no socket error
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_request_parts_name_each_model() -> None:
    heads, body = request_parts("h", 1, 3)
    assert heads[2].startswith(b"POST /v2/models/m0002/infer HTTP/1.1\r\n")
    assert f"Content-Length: {len(body)}\r\n".encode() in heads[0]
    assert len(body) > repository.DIMS[0] * 4


def test_the_client_records_every_request(stub_url: str) -> None:
    plan = LoadPlan(stub_url, models=10, concurrency=4, processes=2, duration_s=1.0, seed=5,
                    s=1.1, request_timeout_s=5.0)  # fmt: skip
    run = LoadRun(plan, time.monotonic() + 0.3)
    run.start()
    records = run.join()
    n = len(records.models)
    assert n > 20
    assert len(records.sent) == len(records.latency) == len(records.status) == n
    assert records.models.min() >= 0 and records.models.max() < 10
    assert set(records.status.tolist()) <= {200, 503}
    assert np.all(records.status[records.models == 2] == 503)
    assert np.all(records.status[records.models == 3] == 200) and np.any(records.models == 3)
    assert np.all(records.latency > 0)
    assert records.sent.max() < run.begin + plan.duration_s
    assert 0 < records.cpu_s < 10
    assert np.bincount(records.models, minlength=10)[0] > np.bincount(records.models)[9]
