"""MLflow tracking (pipeline.tracking): train and leaderboard datasets reported into a real local MLflow store (sqlite
in tmp_path) and read back with MLflow's own client; a second report adds nothing; a bad store is one line."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient
from transformers import AutoConfig

from pipeline.config import load_config
from pipeline.errors import ConfigError, InputError
from pipeline.leaderboard import stage as ranking
from pipeline.model.exported import Encoder
from pipeline.model.transformer import HF_DIR, ST_DIR
from pipeline.preflight import configured
from pipeline.stage import run_stage
from pipeline.tracking.config import MlflowConfig
from pipeline.tracking.mlflow_report import HTTP_SETTINGS, report_leaderboard, report_trainings
from pipeline.train.card import CARD, train_info, write_card
from pipeline.train.config import TrainConfig
from pipeline.train.curves import PNG, write_curves
from storage import DatasetError, DatasetWriter, dataset_path, read_manifest
from tests.conftest import free_port, http_server
from tests.helpers import tiny_model

STEPS = 6
# Train's per-step rows as the loop writes them: dev scores at some steps only, MLM absent (a contrastive-only run).
CURVES = [
    {
        "step": s,
        "loss": 3.0 - 0.25 * s,
        "contrastive_loss": 3.0 - 0.25 * s,
        "mlm_loss": None,
        "lr": 1e-3 * s / STEPS,
        "grad_norm": 1.0 + s / 10,
        "data_seconds": 0.01,
        "seconds": 2.0 * s,
        "dev_spearman": 0.1 * s if s % 3 == 0 else None,
    }
    for s in range(1, STEPS + 1)
]
# Leaderboard rows: a run over two seeds, a run of one seed (its own row) and a baseline; STS-B cosine per model.
MODELS = {"declutr (seed 0)": ("m0", 0, 0.80), "declutr (seed 1)": ("m1", 1, 0.70), "simcse": ("m2", 42, 0.60)}


def _dataset(art: Path, stage, fp, config, inputs, rows=None, extra=None, build=None) -> str:
    schema = pa.Table.from_pylist(rows).schema if rows else None
    with DatasetWriter(str(art), stage, fp, config=config, inputs=inputs, schema=schema) as out:
        if rows:
            out.write(rows)
        out.extra.update(extra or {})
        if build:
            build(out)
    return dataset_path(str(art), stage, fp)


def _scores(model: str, kind: str, stsb: float) -> list[dict]:
    common = {
        "model": model,
        "kind": kind,
        "subset": "all",
        "split": "test",
        "metric": "spearman",
        "n": 100,
        "task": "STSB",
        "model_fingerprint": model,
        "data_hash": "d",
    }
    return [{**common, "protocol": "cosine", "value": stsb}, {**common, "protocol": "senteval", "value": stsb - 0.1}]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict:
    """Finished datasets as the stages leave them: pairs and init, a train dataset per model (a tiny exported model,
    its card, metrics.parquet and curves as train.run writes them), an evaluate dataset per row and the leaderboard
    stage's dataset over them."""
    art = tmp_path_factory.mktemp("tracked")
    _dataset(art, "decontaminate", "f" * 16, {}, {}, rows=[{"text": f"doc {i}"} for i in range(20)])
    pairs = _dataset(
        art,
        "augment",
        "a" * 16,
        {},
        {"documents": "f" * 16, "tokenizer": "t" * 16},
        rows=[{"anchor_ids": [1, 2]} for _ in range(48)],
    )
    init = _dataset(art, "init", "i" * 16, {"base": None}, {}, extra={"parameters": 999})
    trained, scores = {}, {}
    for name, (tag, seed, stsb) in MODELS.items():
        cfg = TrainConfig(batch_size=4, max_steps=STEPS, seed=seed)

        def build(out, cfg=cfg):
            tiny_model(Path(out.local_dir))
            pq.write_table(pa.Table.from_pylist(CURVES), f"{out.local_dir}/metrics.parquet")
            write_curves(CURVES, out.local_dir)
            out.extra.update({"steps": STEPS, "final_loss": CURVES[-1]["loss"], "train_seconds": 12.0})
            out.extra["card"] = train_info(
                cfg,
                {"pairs": pairs, "init": init},
                out.extra,
                AutoConfig.from_pretrained(f"{out.local_dir}/{HF_DIR}"),
                f"{out.local_dir}/{ST_DIR}",
            )
            write_card(f"{out.local_dir}/{ST_DIR}", out.extra["card"])

        fp = tag * 8
        trained[name] = _dataset(
            art, "train", fp, {"train": cfg.model_dump()}, {"pairs": "a" * 16, "init": "i" * 16}, build=build
        )
        scores[name] = (fp, "trained", stsb)
    scores["random"] = (None, "random", 0.2)
    inputs = {}
    for name, (model_fp, kind, stsb) in scores.items():
        rows, fp = _scores(name, kind, stsb), f"s{len(inputs)}".ljust(16, "0")
        _dataset(
            art,
            "evaluate",
            fp,
            {"model": name, "spec": {"kind": kind}},
            {"model": model_fp} if model_fp else {},
            rows=rows,
        )
        inputs[f"scores-{name}"] = dataset_path(str(art), "evaluate", fp)
    leaderboard = run_stage(ranking.STAGE, {"rank_by": None}, inputs, str(art))
    return {"trained": trained, "leaderboard": leaderboard}


def _store(tmp_path: Path) -> MlflowConfig:
    return MlflowConfig(uri=f"sqlite:///{tmp_path}/store/mlflow.db", experiment="tiny")


def _runs(client: MlflowClient, settings: MlflowConfig) -> dict:
    experiment = client.get_experiment_by_name(settings.experiment)
    return {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}


def test_runs_hold_the_recipe_curves_scores_card_and_table_and_a_second_report_adds_nothing(artifacts, tmp_path):
    settings = _store(tmp_path)
    ids = report_trainings(settings, artifacts["trained"])
    client = MlflowClient(tracking_uri=settings.uri)
    runs = _runs(client, settings)
    assert sorted(runs) == ["declutr (seed 0)", "declutr (seed 1)", "simcse (seed 42)"]
    run, run_dir = runs["declutr (seed 1)"], artifacts["trained"]["declutr (seed 1)"]
    assert run.info.run_id == ids["declutr (seed 1)"] and run.info.status == "FINISHED"
    params = run.data.params
    assert params["train.seed"] == "1" and params["train.batch_size"] == "4" and params["train.lr"] == "5e-05"
    # the exported model's parameters as the leaderboard counts them, not the init stage's (its MLM head)
    assert params["input.pairs"] == "a" * 16 and params["parameters"] == str(Encoder(run_dir).parameters)
    # The recipe as the leaderboard states what ran: its 6 steps of batch 4 read 24 of the 48 pairs.
    assert params["recipe"] == TrainConfig(batch_size=4, max_steps=STEPS, seed=1).recipe().replace(
        f", {STEPS} steps,", f", {STEPS} steps on 24 of 48 pairs,"
    )
    assert run.data.tags["cpipe.train_fingerprint"] == "m1" * 8
    for key, column in (("loss/total", "loss"), ("optim/lr", "lr"), ("optim/grad_norm", "grad_norm")):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == [(r["step"], pytest.approx(r[column])) for r in CURVES], key
    dev = client.get_metric_history(run.info.run_id, "dev/spearman")
    assert sorted((m.step, m.value) for m in dev) == [(3, pytest.approx(0.3)), (6, pytest.approx(0.6))]
    assert client.get_metric_history(run.info.run_id, "loss/mlm") == [], "a missing value was logged"
    assert run.data.metrics["result/steps"] == STEPS
    assert {f.path for f in client.list_artifacts(run.info.run_id)} >= {PNG, "model_card"}

    lb = read_manifest(artifacts["leaderboard"])["fingerprint"]
    logged = report_leaderboard(settings, artifacts["leaderboard"])
    assert logged == ids, "the leaderboard found the runs the training report made"
    runs = _runs(client, settings)
    # Each model's own score x 100: a repeat's its seed's, not its row's mean over seeds.
    expected = {"declutr (seed 0)": 80.0, "declutr (seed 1)": 70.0, "simcse (seed 42)": 60.0}
    for name, stsb in expected.items():
        metrics = runs[name].data.metrics
        assert metrics["leaderboard/STSB cosine"] == pytest.approx(stsb), name
        assert metrics["leaderboard/STSB senteval"] == pytest.approx(stsb - 10), name
    simcse = runs["simcse (seed 42)"].info.run_id
    card = Path(client.download_artifacts(simcse, f"model_card/{CARD}", str(tmp_path / "dl")))
    assert card.read_text() == Path(artifacts["trained"]["simcse"], ST_DIR, CARD).read_text()
    assert "| STSB cosine | 60.00 |" in card.read_text(), "not the card the leaderboard rewrote"
    table = Path(client.download_artifacts(simcse, f"leaderboards/{lb}/leaderboard.md", str(tmp_path / "dl2")))
    assert table.read_text() == Path(artifacts["leaderboard"], "leaderboard.md").read_text()
    assert runs["declutr (seed 0)"].data.tags["cpipe.leaderboard_row"] == "declutr"

    # Reported again (a rerun that reused every stage): no run, no point added.
    assert report_trainings(settings, artifacts["trained"]) == ids
    assert report_leaderboard(settings, artifacts["leaderboard"]) == ids
    assert sorted(_runs(client, settings)) == sorted(expected)
    assert len(client.get_metric_history(simcse, "loss/total")) == STEPS
    assert len(client.get_metric_history(simcse, "leaderboard/STSB cosine")) == 1


def test_a_leaderboard_reported_first_reports_its_trainings_too(artifacts, tmp_path):
    settings = _store(tmp_path)
    report_leaderboard(settings, artifacts["leaderboard"])
    client = MlflowClient(tracking_uri=settings.uri)
    runs = _runs(client, settings)
    assert sorted(runs) == ["declutr (seed 0)", "declutr (seed 1)", "simcse (seed 42)"]
    run = runs["simcse (seed 42)"].info.run_id
    assert len(client.get_metric_history(run, "loss/total")) == STEPS
    assert runs["simcse (seed 42)"].data.metrics["leaderboard/STSB cosine"] == pytest.approx(60.0)


@pytest.mark.parametrize(
    "uri, said",
    [
        ("mlruns", "is a path"),
        ("ftp://host/x", "no tracking store for ftp"),
        ("sqlite://", "names no database file"),
        ("https://user:secret@host", "holds credentials"),
        ("http://", "names no host"),
    ],
)
def test_a_bad_uri_is_one_config_error_naming_the_key(tmp_path, uri, said):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[f"tracking.mlflow.uri={uri}"])
    message = str(e.value)
    assert "tracking.mlflow.uri" in message and said in message and "\n" not in message
    assert "secret" not in message


def test_tracking_is_off_unless_configured():
    assert load_config().tracking.mlflow is None
    assert load_config(overrides=["tracking=null"]).tracking.mlflow is None
    with pytest.raises(ConfigError, match="unknown key 'tracking.mlflow.bogus'"):
        load_config(overrides=["tracking.mlflow.uri=sqlite:///x.db", "tracking.mlflow.bogus=1"])


def test_a_store_that_cannot_be_opened_is_one_input_error_naming_the_key(artifacts, tmp_path):
    (tmp_path / "not-a-db").write_bytes(b"this is no sqlite database" * 100)
    for uri in (f"sqlite:///{tmp_path}/not-a-db", f"sqlite:///{tmp_path}/not-a-db/below/mlflow.db"):
        with pytest.raises(InputError) as e:
            report_trainings(MlflowConfig(uri=uri), artifacts["trained"])
        assert str(e.value).startswith(f"tracking.mlflow.uri {uri}: ") and "\n" not in str(e.value)


def _answering(status: int, hits: list[str]):
    """A web server answering every request with `status`, recording each request's path: a tracking server
    that answers the pre-flight and fails the reports (503: busy, or dying)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(status)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args):
            pass

    return http_server(Handler)


def test_the_preflight_refuses_a_tracking_server_that_does_not_answer_in_one_line(tmp_path, tiny_corpus):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = dict(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=[f"tracking.mlflow.uri={uri}"])
    with pytest.raises(ConfigError) as e:
        configured(**run)
    assert str(e.value).startswith(f"tracking.mlflow.uri {uri}: no tracking server answers there (")
    assert "\n" not in str(e.value)
    configured(**run, until="augment")  # a run that stops before training reports nothing: not checked
    hits: list[str] = []
    with _answering(404, hits) as srv:  # any answer is a server's; what it says is MLflow's to read
        configured(**{**run, "overrides": [f"tracking.mlflow.uri=http://127.0.0.1:{srv.server_port}"]})
    assert hits == ["/"]


def test_the_preflight_refuses_a_sqlite_store_that_cannot_be_written(tmp_path, tiny_corpus):
    (tmp_path / "file").write_text("")
    uri = f"sqlite:///{tmp_path}/file/mlruns/mlflow.db"
    with pytest.raises(DatasetError) as e:
        configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=[f"tracking.mlflow.uri={uri}"])
    message = str(e.value)
    assert message.startswith(f"tracking.mlflow.uri {tmp_path}/file/mlruns: cannot write there (NotADirectoryError")
    assert "\n" not in message


def test_a_tracking_server_failing_after_the_preflight_costs_seconds_not_minutes(artifacts, monkeypatch):
    """MLflow's own default tries a request 8 times over 4 minutes: here one try and two retries, one line."""
    for name in HTTP_SETTINGS:
        monkeypatch.delenv(name, raising=False)  # the test's, not the environment's
    hits: list[str] = []
    with _answering(503, hits) as srv:
        uri = f"http://127.0.0.1:{srv.server_port}"
        with pytest.raises(InputError) as e:
            report_trainings(MlflowConfig(uri=uri), artifacts["trained"])
    assert str(e.value).startswith(f"tracking.mlflow.uri {uri}: MlflowException: ") and "\n" not in str(e.value)
    assert len(hits) == 3 and all(h.startswith("/api/2.0/mlflow/") for h in hits), hits
