"""Shared fixtures: tiny corpora, tiny evaluation data and a tiny config, all made in the test."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack, contextmanager, suppress
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = os.environ.get("CPIPE_SHARED_DATA")
# The processes tests start (`cpipe`, Ray's workers) import this tree's code, as pytest does: a console script
# finds the installed one first, which for a git worktree of an editable install is another checkout's.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

WORDS = [
    f"{a}{b}"
    for a in ("ka", "lo", "mi", "nu", "pe", "ro", "si", "tu", "va", "ze")
    for b in ("bar", "dos", "fen", "gil", "hom", "jut", "kes", "lim", "mor", "nap", "pix", "qua")
]


def make_document(rng: np.random.Generator, n_words: int) -> str:
    """Sentences of Zipf-distributed made-up words: enough structure for BPE and fastText to learn."""
    ranks = np.minimum(rng.zipf(1.3, size=n_words), len(WORDS)) - 1
    words = [WORDS[r] for r in ranks]
    sentences, i = [], 0
    while i < len(words):
        k = int(rng.integers(5, 15))
        sentences.append(" ".join(words[i : i + k]).capitalize() + ".")
        i += k
    return " ".join(sentences)


def write_corpus(root: Path, n_docs: int = 16, n_words: int = 400, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        (root / f"doc{i:03d}.txt").write_text(make_document(rng, n_words), encoding="utf-8")
    return root


def write_sts(root: Path, n_pairs: int = 40, seed: int = 1) -> Path:
    """A tiny STS12 task and STS-B in SentEval's file layout."""
    rng = np.random.default_rng(seed)
    sts12 = root / "STS12-en-test"
    sts12.mkdir(parents=True, exist_ok=True)
    pairs, gold = [], []
    for _ in range(n_pairs):
        a = make_document(rng, 8).rstrip(".")
        words = a.split()
        keep = int(rng.integers(0, len(words) + 1))
        b = " ".join(words[:keep] + [WORDS[int(rng.integers(len(WORDS)))] for _ in words[keep:]])
        pairs.append(f"{a}\t{b}")
        gold.append(f"{5 * keep / len(words):.3f}")
    (sts12 / "STS.input.MSRvid.txt").write_text("\n".join(pairs) + "\n")
    (sts12 / "STS.gs.MSRvid.txt").write_text("\n".join(gold) + "\n")
    stsb = root / "STSBenchmark"
    stsb.mkdir(exist_ok=True)
    for split in ("dev", "test"):
        lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g}\t{p}" for i, (p, g) in enumerate(zip(pairs, gold))]
        (stsb / f"sts-{split}.csv").write_text("\n".join(lines) + "\n")
    return root


TINY_CONFIG = """
tokenizer: {vocab_size: 400, min_frequency: 2}
filter: {min_tokens: 200}
augment: {epochs: 2, num_anchors: 2, num_positives: 2, min_length: 8, max_length: 32}
model: {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, max_position_embeddings: 66}
train: {batch_size: 4, max_steps: 6, lr: 1.0e-3, max_length: 34, checkpoint_every: 2, log_every: 2}
runs:
  declutr: {}
  mlm-only: {contrastive: false}
evaluate:
  batch_size: 32
  max_length: 64
  fasttext: {dim: 8, epoch: 1, bucket: 1000}
ray: {num_cpus: 2}
"""


@pytest.fixture(scope="module")
def one_torch_thread():
    """For modules of tiny models: a second thread buys nothing, and on a loaded 2-core machine the
    threads' spin-waiting made them 10-50 times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "tiny.yaml"
    path.write_text(TINY_CONFIG)
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "docs")


@pytest.fixture(scope="session")
def tiny_sts(tmp_path_factory) -> Path:
    return write_sts(tmp_path_factory.mktemp("eval") / "senteval")


# Fixtures that several test modules share. Imports inside them: this module loads before any test runs.


@pytest.fixture(scope="module")
def tokenizer():
    """Byte-level BPE with the tokenizer stage's specials, trained on made-up documents (the tiny encoders' tests)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from pipeline.tokenizer.loading import SPECIAL

    rng = np.random.default_rng(0)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [make_document(rng, 300) for _ in range(20)], vocab_size=300, special_tokens=list(SPECIAL.values())
    )
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **SPECIAL)


@pytest.fixture(scope="module")
def tiny_lid_model(tmp_path_factory) -> Path:
    """A two-language supervised fastText model trained on made-up sentences."""
    import fasttext

    from tests.helpers import DE_WORDS, EN_WORDS, sentence

    rng = random.Random(0)
    root = tmp_path_factory.mktemp("langid")
    lines = [
        f"__label__{lang} {sentence(rng, words)}"
        for _ in range(300)
        for lang, words in (("en", EN_WORDS), ("de", DE_WORDS))
    ]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    # thread >= 11: fewer gives NaNs on a 2-core machine (DESIGN.md, fasttext facts).
    model = fasttext.train_supervised(str(root / "train.txt"), epoch=10, dim=16, minCount=1, thread=12, verbose=0)
    model.save_model(str(root / "tiny.bin"))
    return root / "tiny.bin"


@pytest.fixture(scope="module")
def lid_model(request) -> str:
    """fastText's lid.176 from the shared data, or tiny_lid_model without it."""
    return f"{SHARED}/models/lid.176.ftz" if SHARED else str(request.getfixturevalue("tiny_lid_model"))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Ten real OpenWebText documents when the shared data is there, else made-up ones."""
    from tests.helpers import UNICODE_DOC

    if SHARED:
        sample = f"{SHARED}/corpus/openwebtext-sample"
        with open(f"{sample}/train.jsonl") as a, open(f"{sample}/valid.jsonl") as b:
            found = [json.loads(line)["text"] for line in [*a, *b] if line.strip()]
    else:
        rng = np.random.default_rng(0)
        found = [make_document(rng, 300) for _ in range(10)]
    return found + [UNICODE_DOC]


@pytest.fixture
def release(tmp_path, texts):
    """OpenWebText's release layout: subset00 with two xz members (3 + 3 documents), subset01 with one member
    (the rest).

    Returns the directory and {txt name: (key, text)} in reading order."""
    from tests.helpers import txt_name, write_subset, xz_tar

    names = [txt_name(i, t) for i, t in enumerate(texts)]
    layout = {
        ("urlsf_subset00.tar", "urlsf_subset00-1_data.xz"): range(0, 3),
        ("urlsf_subset00.tar", "urlsf_subset00-2_data.xz"): range(3, 6),
        ("urlsf_subset01.tar", "urlsf_subset01-1_data.xz"): range(6, len(texts)),
    }
    expected, tars = {}, {}
    for (tar, xz), idx in layout.items():
        tars.setdefault(tar, {})[xz] = xz_tar({names[i]: texts[i].encode() for i in idx})
        for i in idx:
            expected[names[i]] = (f"{tar}/openwebtext/{xz}/{names[i]}", texts[i])
    root = tmp_path / "owt"
    root.mkdir()
    for tar, members in tars.items():
        write_subset(root / tar, members)
    return root, expected


@pytest.fixture(scope="module")
def paras() -> list[str]:
    """Six WikiText-2 paragraphs when the shared data is there, else made-up ones; free of wiki markup either way."""
    if SHARED:
        with open(f"{SHARED}/corpus/wikitext-2/wiki.valid.raw", encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip() and not line.strip().startswith("=")]
        return [p for p in lines if not re.search(r"''|[\[\]{}<>|&=~_*#:;]", p)][:6]
    rng = np.random.default_rng(0)
    return [make_document(rng, 60) for _ in range(6)]


@pytest.fixture
def file_server():
    """An HTTP server on 127.0.0.1 of srv.files by path, the first request for each cut in half, the rest resumed
    with `Range: bytes=N-` (srv.requests: each request's path and range)."""
    from tests.helpers import FileHandler

    with http_server(FileHandler) as srv:
        srv.files, srv.requests = {}, []
        yield srv


@pytest.fixture(scope="module")
def evaluate_setup(tmp_path_factory, tiny_sts):
    """A tiny model (the init stage's export), tiny STS data and the filter stage's documents of a tiny corpus."""
    from pipeline.config import Config
    from pipeline.corpus import stage as corpus
    from pipeline.corpus.config import CorpusConfig
    from pipeline.filter import stage as filter
    from pipeline.filter.config import FilterConfig
    from pipeline.stage import run_stage
    from pipeline.tokenizer import stage as tokenizer
    from tests.helpers import tiny_model

    root = tmp_path_factory.mktemp("evaluate")
    art = str(root / "artifacts")
    docs = run_stage(
        corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(write_corpus(root / "docs"))]))), {}, art
    )
    tok = run_stage(
        tokenizer.STAGE, {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64}, {"corpus": docs}, art
    )
    kept = run_stage(
        filter.STAGE,
        {**FilterConfig(min_tokens=10).model_dump(), "runtime": {}},
        {"corpus": docs, "tokenizer": tok},
        art,
    )
    return {
        "root": root,
        "art": art,
        "model": str(tiny_model(root / "model")),
        "documents": kept,
        "data": str(tiny_sts),
    }


@pytest.fixture(scope="module")
def st_and_encoder(tmp_path_factory):
    """A tiny model's sentence-transformers export loaded by both sides of a reference check: sentence-transformers'
    SentenceTransformer and ours (pipeline.model.exported.Encoder, as the evaluate stage loads it)."""
    from sentence_transformers import SentenceTransformer

    from pipeline.model.exported import Encoder
    from pipeline.model.transformer import ST_DIR
    from tests.helpers import tiny_model

    st_dir = tiny_model(tmp_path_factory.mktemp("model") / "export") / ST_DIR
    st = SentenceTransformer(str(st_dir), device="cpu")
    return st, Encoder(str(st_dir), max_length=st.max_seq_length, device="cpu")


def prebuild(config: Path, corpus: Path, artifacts: Path, until: str, overrides: list[str]) -> dict[str, str]:
    """The datasets up to `until` that `cpipe run --config config --corpus corpus --artifacts artifacts --set
    overrides...` builds, built in this process by the flows' own loop without Prefect tasks (build's run_one):
    that run reuses them and builds only what comes after. Label -> path."""
    from flows.pipeline_flows import build
    from pipeline import preflight, registry
    from pipeline.stage import run_stage

    cfg = preflight.configured(str(config), str(corpus), None, str(artifacts), until, overrides)
    done: dict[str, str] = {}
    build(
        cfg,
        registry.stages(last=until),
        done,
        until,
        run_one=lambda stage, config, inputs, label: run_stage(stage, config, inputs, cfg.artifacts),
    )
    return done


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance (2 CPUs, no dashboard, workers' output not echoed) for the module's tests, shut down
    after them: one left alive beside later tests' own Ray (a `ray start` cluster, a cpipe run) breaks theirs
    (a cluster's job agent never came up: "No available agent to submit job")."""
    import ray

    if not ray.is_initialized():  # "local": never a cluster that `ray start` left on this machine
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def isolated_prefect(tmp_path_factory):
    """Each test session gets its own Prefect home (embedded SQLite server) and no external API."""
    home = tmp_path_factory.mktemp("prefect-home")
    old = {k: os.environ.get(k) for k in ("PREFECT_HOME", "PREFECT_API_URL")}
    os.environ["PREFECT_HOME"] = str(home)
    os.environ.pop("PREFECT_API_URL", None)
    yield home
    _SESSION_SERVER.close()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


CPIPE = str(Path(sys.executable).parent / "cpipe")
PREFECT = str(Path(sys.executable).parent / "prefect")


def wait_for(check, what: str, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not check():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextmanager
def prefect_server(home: Path):
    """A real Prefect server (`prefect server start`) on 127.0.0.1 with its own home; yields the environment that
    points Prefect's clients at it."""
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "server.log", "w") as log:
        server = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(lambda: _healthy(api), "the Prefect server")
            yield env
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


_SESSION_SERVER = ExitStack()  # closed by isolated_prefect as the session ends
_session_api: list[str] = []


def flow_env() -> dict[str, str]:
    """The environment of a `cpipe` flow run: one Prefect server for the session's runs, in the session's
    Prefect home, started by the first run that asks. Alone, every run starts and stops a temporary server of
    its own: about 15 s of CPU each. test_cli_errors' stopped run and test_remote_storage keep theirs."""
    if not _session_api:
        _session_api.append(
            _SESSION_SERVER.enter_context(prefect_server(Path(os.environ["PREFECT_HOME"])))["PREFECT_API_URL"]
        )
    return {**os.environ, "PREFECT_API_URL": _session_api[0]}


def cpipe(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the installed console script, as a user would; the flow commands on the session's Prefect server."""
    env = flow_env() if args[0] in ("run", "evaluate") else None
    proc = subprocess.run([CPIPE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if "Starting temporary server" in proc.stdout + proc.stderr:  # Prefect's own line when a flow run starts one
        _STARTED.add("prefect")
    return proc


# What the running test started that makes it slow: "ray", "prefect" (a server), "processes" (a Python process:
# worker processes, a subprocess of python or of a console script), "compile" (torch.compile). `make test-quick`
# (-m "not slow") leaves out tests marked so; a test that starts one without its marker fails, so the quick
# command stays quick. What a test's fixtures start as they are set up counts as the test's.
_STARTED: set[str] = set()
_MARKER = {"ray": "ray", "prefect": "prefect", "processes": "slow", "compile": "slow"}
_WHAT = {"ray": "Ray", "prefect": "a Prefect server", "processes": "Python processes", "compile": "torch.compile"}


def _runs_python(args, shell: bool = False) -> bool:
    """Whether a subprocess' command is a Python interpreter or a Python console script (cpipe, ray, prefect)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        args = os.fsdecode(args).split()[:1] if shell else [args]
    if not args:
        return False
    exe = os.fsdecode(args[0])
    path = exe if os.sep in exe else shutil.which(exe)
    if not path or not os.path.isfile(path):
        return False
    if Path(os.path.realpath(path)).name.startswith("python"):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _record_started() -> None:
    """Patches, once per session, what starts processes, so that the guard sees every one."""
    popen_init = subprocess.Popen.__init__

    def init(self, args, *a, **kw):
        if _runs_python(args, kw.get("shell", False)):
            _STARTED.add("processes")
        popen_init(self, args, *a, **kw)

    process_start = multiprocessing.process.BaseProcess.start  # Process, Pool, ProcessPoolExecutor, mp.spawn

    def start(self):
        _STARTED.add("processes")
        return process_start(self)

    subprocess.Popen.__init__ = init
    multiprocessing.process.BaseProcess.start = start


def _record_compile() -> None:
    """torch.compile (nn.Module.compile calls it) records that it ran; torch once imported, the wrapper stays."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(torch.compile, "_records_for_guard", False):
        return
    compile_ = torch.compile

    @functools.wraps(compile_)
    def compile(*args, **kwargs):
        _STARTED.add("compile")
        return compile_(*args, **kwargs)

    compile._records_for_guard = True
    torch.compile = compile


def pytest_configure(config):
    _record_started()


def _servers_up() -> set[str]:
    up = set()
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        up.add("ray")
    server = sys.modules.get("prefect.server.api.server")
    if server is not None and any(s.running for s in server.SubprocessASGIServer._instances.values()):
        up.add("prefect")
    return up


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("e2e"):  # a whole flow run starts both
            item.add_marker("ray")
            item.add_marker("prefect")
        if any(item.get_closest_marker(m) for m in ("ray", "prefect")):
            item.add_marker("slow")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _STARTED.clear()  # before the test's fixtures: what a module fixture starts for it counts too
    _record_compile()
    return (yield)


_declared_up: set[str] = set()  # servers up now that a marked test started (a shared Ray instance stays up)


@pytest.fixture(autouse=True)
def declared_servers(request):
    global _declared_up
    yield
    _record_compile()  # torch first imported by this test: compiles from the next test on are seen
    marked = {m for m in ("ray", "prefect", "slow") if request.node.get_closest_marker(m)}
    up = _servers_up()
    started = _STARTED | (up - _declared_up)
    _declared_up = (_declared_up | (marked & {"ray", "prefect"})) & up
    undeclared = sorted({_MARKER[s] for s in started} - marked)
    if undeclared:
        what = [_WHAT[s] for s in sorted(started) if _MARKER[s] in undeclared]
        pytest.fail(
            f"this test starts {' and '.join(what)}: mark it "
            f"{', '.join(f'@pytest.mark.{m}' for m in undeclared)} (pyproject.toml's markers)"
        )


@contextmanager
def http_server(handler):
    """A real HTTP server on 127.0.0.1 (a free port) serving `handler` in a thread, stopped afterwards."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()


def signal_every_process(pid: int, sig: int) -> None:
    """`sig` to `pid` and every process below it at once, as a cgroup's signal (systemd, Slurm, the OOM killer)
    reaches them: `killpg` no longer does, since `cpipe` starts the run in a session of its own."""
    top = psutil.Process(pid)
    for p in [top, *top.children(recursive=True)]:
        with suppress(psutil.NoSuchProcess):
            p.send_signal(sig)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ray_cluster(nodes: int = 2, cpus: int = 1, dashboard: bool = False):
    """A real multi-node Ray cluster on 127.0.0.1, started with `ray start` as a user would; yields its address.

    Every node runs in its own process group, so stopping the cluster kills exactly the
    processes it started (`ray stop` would kill any other Ray instance on the machine too).
    """
    _STARTED.add("ray")
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        # The session's local instance (local_ray): with it alive, a bare ray.init() on this host (a job's run,
        # Ray's own actors) finds two instances and stops; the next test that asks starts it again.
        sys.modules["ray"].shutdown()
    ray_cli = str(Path(sys.executable).parent / "ray")
    # As from an activated venv: a job's `python` is the nodes' python.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "PATH": path}
    port, dashboard_port = free_port(), free_port()
    # A temporary directory of its own (short: Ray's socket paths must be): `ray start --head` writes its address
    # there for a bare ray.init() to join, and a job's driver is pointed at the address found there, which in
    # Ray's shared /tmp/ray is the last cluster started on the host, perhaps another test's (pytest-xdist's
    # other worker), perhaps gone.
    temp_dir = tempfile.mkdtemp(prefix="rc-", dir="/tmp")
    common = [
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={cpus}",
        "--object-store-memory=100000000",
        "--block",
        f"--temp-dir={temp_dir}",
    ]
    head_args = [
        "--head",
        f"--port={port}",
        f"--include-dashboard={str(dashboard).lower()}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
    ]
    started = []

    def start(args: list[str]) -> None:
        # Each node's agent on a port of its own: Ray's fixed default (52365) is taken by any other Ray on the
        # host (a user's run, the other node), and a node without its agent takes no jobs.
        agent = f"--dashboard-agent-listen-port={free_port()}"
        started.append(
            subprocess.Popen(
                [ray_cli, "start", *args, *common, agent],
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    try:
        start(head_args)
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while subprocess.run([ray_cli, "status", f"--address={address}"], env=env, capture_output=True).returncode:
            assert time.monotonic() < deadline and started[0].poll() is None, "the Ray head did not start"
            time.sleep(1)
        for _ in range(nodes - 1):
            start([f"--address={address}"])
        while (
            status := subprocess.run(
                [ray_cli, "status", f"--address={address}"], env=env, capture_output=True, text=True
            ).stdout
        ).count("node_") < nodes:
            assert time.monotonic() < deadline, f"{nodes} Ray nodes did not join:\n{status}"
            time.sleep(1)
        yield {"address": address, "dashboard": f"http://127.0.0.1:{dashboard_port}"}
    finally:
        for proc in reversed(started):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(started):
            try:  # a worker node's `ray start` took 35 s to leave on SIGTERM; its group is killed after 5
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            with suppress(ProcessLookupError):  # anything the node left behind in its group
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)
