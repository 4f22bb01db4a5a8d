"""Data forensics: what a stage dataset's directory holds beside its shards never reaches a reader of the shards
(pandas, pyarrow, the project's own), and each is found where it is looked for."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from flows.cli import main
from pipeline.config import Config
from pipeline.evaluate import items as test_items
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.stage import run_stage
from storage import dataset_parts, dataset_path, read_manifest, read_table
from storage.dataset import MANIFEST
from storage.dropped import read_dropped
from tests.test_decontaminate import DIRTY, DOCS, build, documents  # noqa: F401  (a fixture)
from tests.test_filter import stages  # noqa: F401  (a fixture)


def before_files(path: str) -> None:
    """The dataset's manifest as written before it recorded the files beside the shards."""
    manifest = json.loads(open(f"{path}/{MANIFEST}").read())
    del manifest["files"]
    with open(f"{path}/{MANIFEST}", "w") as f:
        json.dump(manifest, f)


def test_pandas_reads_an_evaluate_datasets_scores_and_the_items_stay_readable(evaluate_setup, tmp_path):
    cfg = Config(evaluate=EvaluateConfig(data=evaluate_setup["data"], batch_size=16, transfer=False))
    row = evaluate.Row("tiny", {"kind": "untrained"}, {"model": evaluate_setup["model"]}, {"objective": "test"})
    out = run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, str(tmp_path / "art"))
    scores = read_table(out).to_pandas()
    kept = test_items.read(out)
    assert len(kept) > len(scores) > 0  # the items outnumber the scores: reading them in their place shows
    pd.testing.assert_frame_equal(pd.read_parquet(out), scores)
    # a dataset written before the items were renamed keeps them under the old name (and, older than the record
    # of its side files, is checked by its shards alone)
    before_files(out)
    os.rename(f"{out}/{test_items.ITEMS}", f"{out}/{test_items.OLD_ITEMS}")
    pd.testing.assert_frame_equal(test_items.read(out), kept)


def titles(filtered: str) -> dict[str, str]:
    """doc_id -> the corpus file's name, from the corpus dataset the filter read."""
    art, _, _ = dataset_parts(filtered)
    corpus = read_table(dataset_path(art, "corpus", read_manifest(filtered)["inputs"]["corpus"])).to_pandas()
    return dict(zip(corpus["doc_id"], corpus["title_or_url"]))


def test_the_filter_records_each_dropped_document_with_its_reason_and_what_was_seen(stages):
    path = stages(language="en", near_dedup=True)
    dropped = read_dropped(path).to_pandas()
    name = titles(path)
    id_of = {v: k for k, v in name.items()}
    assert all(name[d] == title for d, title in zip(dropped["doc_id"], dropped["title_or_url"]))  # found by name
    why = {title: (reason, detail) for _, title, reason, detail in dropped.itertuples(index=False)}
    assert {k: reason for k, (reason, _) in why.items()} == {
        "en-short": "too_short",
        "zz-copy": "duplicate",
        "de-1": "language",
        "zz-near": "near_duplicate",
    }
    assert why["zz-copy"][1] == f"same text as {id_of['en-1']}"
    assert why["zz-near"][1].startswith(f"like {id_of['en-1']} (estimated Jaccard 0.")
    assert why["de-1"][1].startswith("de (p=") and why["de-1"][1].endswith("kept: en (p>=0.65)")
    tokens, _ = why["en-short"][1].split(" tokens, fewer than ")
    assert int(tokens) < 100 and why["en-short"][1].endswith("fewer than 100")
    counts = read_manifest(path)["counts"]
    assert dropped["reason"].value_counts().to_dict() == {k: v for k, v in counts.items() if k != "kept"}
    assert read_manifest(path)["dropped"] == {"file": "_dropped.parquet", "rows": 4}
    # the dataset's readers see the kept documents alone
    kept = read_table(path).to_pandas()
    pd.testing.assert_frame_equal(pd.read_parquet(path), kept)
    assert ds.dataset(path).to_table().num_rows == len(kept) == 3


def test_a_filter_that_drops_nothing_records_none(stages):
    path = stages(min_tokens=0, dedup=False)
    assert read_dropped(path).num_rows == 0 and read_manifest(path)["dropped"]["rows"] == 0


def test_decontaminate_records_each_dropped_document_with_the_tasks_it_held(documents, tmp_path):
    built = build(documents, tmp_path)
    dropped = read_dropped(built).to_pylist()
    assert sorted((r["doc_id"], r["reason"], r["detail"]) for r in dropped) == [
        (d, "contaminated", "STSB") for d in sorted(DIRTY)
    ]
    _, filtered = documents
    title = dict(zip(*read_table(filtered, columns=["doc_id", "title_or_url"]).to_pydict().values()))
    assert all(r["title_or_url"] == title[r["doc_id"]] for r in dropped)
    pd.testing.assert_frame_equal(pd.read_parquet(built), read_table(built).to_pandas())
    assert len(pd.read_parquet(built)) == len(DOCS) - len(DIRTY)
    # masked documents are kept: none is dropped
    assert read_dropped(build(documents, tmp_path / "report", "report")).num_rows == 0


def test_a_record_from_before_titles_were_kept_reads_with_titles_unknown(documents, tmp_path):
    built = build(documents, tmp_path)
    whole = read_dropped(built)
    before_files(built)
    pq.write_table(whole.drop_columns("title_or_url"), f"{built}/_dropped.parquet")  # as written until now
    old = read_dropped(built)
    assert old.column_names == whole.column_names and old.column("title_or_url").null_count == old.num_rows
    assert old.drop_columns("title_or_url").equals(whole.drop_columns("title_or_url"))


def test_inspect_dropped_prints_every_dropped_document_and_says_when_none_were_recorded(documents, tmp_path, capsys):
    built = build(documents, tmp_path)
    assert main(["inspect", built, "--dropped"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "dropped: 3  contaminated: 3"
    header, *rows = [line.split("\t") for line in out.splitlines()[1:]]  # piped: tab-separated, no boxes
    assert header == ["doc_id", "title_or_url", "reason", "detail"]
    assert sorted(r[0] for r in rows) == sorted(DIRTY) and all(r[2:] == ["contaminated", "STSB"] for r in rows)
    _, filtered = documents  # written by hand, as a dataset from before dropped rows were kept
    assert main(["inspect", filtered, "--dropped"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no record of dropped rows (this filter dataset" in err, err


def test_inspect_piped_lists_stages_in_the_runs_order_and_rows_in_tab_separated_lines_whole_paths_no_boxes(
    stages, capsys
):
    path = stages()
    art = path.rsplit("/", 2)[0]
    assert main(["inspect", art]) == 0
    header, *rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]  # piped: no boxes
    assert header == ["stage", "fingerprint", "rows", "age", "state", "path"]
    listed = [row[0] for row in rows]  # the other tests' filter datasets too
    assert listed == sorted(listed, key=["corpus", "tokenizer", "filter"].index) and set(listed) == {
        "corpus",
        "tokenizer",
        "filter",
    }
    assert sum(path == row[5] for row in rows) == 1  # whole, in its column
    assert main(["inspect", path, "--rows", "2"]) == 0
    shown = capsys.readouterr().out
    header, *rows = [line.split("\t") for line in shown.split("\nrows: ", 1)[1].splitlines()[1:]]
    assert header[:3] == ["doc_id", "source", "title_or_url"] and [len(row) for row in rows] == [len(header)] * 2
    assert not set("│┃━") & set(shown), shown


def test_evaluate_model_names_a_runs_train_dataset_by_its_run_and_says_its_objective(evaluate_setup, tmp_path):
    """A train dataset (a tiny export under train/<fp>, its manifest holding the run's settings) that the
    pipeline's evaluate stage scored as the run "declutr-small" (the real stage), then given to --model."""
    from storage import DatasetWriter
    from tests.helpers import tiny_model

    art = str(tmp_path / "art")
    with DatasetWriter(art, "train", "a1b2c3d4e5f60718", config={"train": {"objective": "declutr"}}, inputs={}) as out:
        tiny_model(Path(out.local_dir))
    cfg = Config(evaluate=EvaluateConfig(data=evaluate_setup["data"], batch_size=16, transfer=False))
    row = evaluate.Row(
        "declutr-small", {"kind": "trained"}, {"model": out.path}, {"objective": "declutr", "corpus": "sotu"}
    )
    run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, art)
    assert evaluate.user_models([out.path]) == {"model/declutr-small": out.path}
    about = evaluate.model_row("declutr-small", out.path).about
    assert (about["objective"], about["corpus"]) == ("declutr", "sotu")
    # never scored by its run: the fingerprint names it, the manifest says its objective
    with DatasetWriter(art, "train", "0000111122223333", config={"train": {"objective": "simcse"}}, inputs={}) as other:
        tiny_model(Path(other.local_dir))
    assert evaluate.user_models([other.path]) == {"model/0000111122223333": other.path}
    assert evaluate.model_row("0000111122223333", other.path).about["objective"] == "simcse"
