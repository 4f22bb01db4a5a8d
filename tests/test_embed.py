"""`embed_file` and `cpipe embed` on a tiny model made in the test: every input format, row order, chunks, errors."""

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import InputError
from pipeline.model.embed_file import embed_file
from pipeline.model.exported import Encoder
from pipeline.model.transformer import HF_DIR, load_mlm
from tests.conftest import cpipe, make_document
from tests.helpers import MAX_LENGTH, tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    # Lengths vary a lot, so the encoder's length sorting really reorders them; an empty one too.
    rng = np.random.default_rng(3)
    out = [make_document(rng, int(n)) for n in rng.integers(1, 40, size=45)]
    out[7] = ""
    return out


@pytest.fixture(scope="module")
def expected(model_dir, sentences) -> np.ndarray:
    return Encoder(str(model_dir), max_length=MAX_LENGTH).encode(sentences, batch_size=8)


def write_input(path: Path, sentences: list[str]) -> Path:
    if path.suffix == ".txt":
        path.write_text("".join(f"{s}\n" for s in sentences), encoding="utf-8")
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"id": i, "text": s}) + "\n" for i, s in enumerate(sentences)))
    elif path.suffix in (".csv", ".tsv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(
                f,
                delimiter="\t" if path.suffix == ".tsv" else ",",
                quoting=csv.QUOTE_NONE if path.suffix == ".tsv" else csv.QUOTE_MINIMAL,
            )
            writer.writerow(["id", "text"])
            writer.writerows(enumerate(sentences))
    else:
        pq.write_table(pa.table({"id": list(range(len(sentences))), "text": sentences}), path, row_group_size=10)
    return path


def embed(model_dir, inp, out, **kwargs) -> int:
    return embed_file(str(model_dir), str(inp), str(out), max_length=MAX_LENGTH, batch_size=8, **kwargs)


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv", ".tsv", ".parquet"])
def test_every_format_gives_the_encoders_embeddings_in_input_order(model_dir, sentences, expected, suffix, tmp_path):
    inp = write_input(tmp_path / f"in{suffix}", sentences)
    n = embed(model_dir, inp, tmp_path / "out.parquet", chunk_rows=1000)
    table = pq.read_table(tmp_path / "out.parquet")
    assert n == table.num_rows == len(sentences)
    assert table.schema.field("row").type == pa.int64()
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 32)
    assert table.column("row").to_pylist() == list(range(len(sentences)))
    assert table.column("text").to_pylist() == sentences
    np.testing.assert_allclose(
        np.stack(table.column("embedding").to_numpy(zero_copy_only=False)), expected, rtol=1e-4, atol=1e-5
    )


def test_rows_stay_in_input_order_though_the_encoder_sorts_by_length(model_dir, tmp_path):
    # Longest last: length sorting reverses the batch, the output must not.
    sentences = [" ".join(["kabar"] * n) for n in range(1, 20)]
    embed(model_dir, write_input(tmp_path / "in.txt", sentences), tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("text").to_pylist() == sentences
    one_by_one = Encoder(str(model_dir), max_length=MAX_LENGTH)
    for s, e in zip(sentences, table.column("embedding").to_pylist()):
        np.testing.assert_allclose(e, one_by_one.encode([s])[0], rtol=1e-4, atol=1e-5)


def test_chunks_smaller_than_the_file_are_row_groups(model_dir, sentences, expected, tmp_path):
    inp = write_input(tmp_path / "in.jsonl", sentences)
    n = embed(model_dir, inp, tmp_path / "out.parquet", chunk_rows=10)
    # Written through a temporary file, yet with the mode of any file made here (the umask's, not 0600).
    assert (tmp_path / "out.parquet").stat().st_mode == inp.stat().st_mode
    f = pq.ParquetFile(tmp_path / "out.parquet")
    assert n == len(sentences) and f.num_row_groups == 5
    assert [f.metadata.row_group(i).num_rows for i in range(5)] == [10, 10, 10, 10, 5]
    table = f.read()
    assert table.column("row").to_pylist() == list(range(len(sentences)))
    np.testing.assert_allclose(
        np.stack(table.column("embedding").to_numpy(zero_copy_only=False)), expected, rtol=1e-4, atol=1e-5
    )


def test_txt_keeps_blank_lines_and_splits_on_newlines_only(model_dir, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_bytes("first\r\n\nthird has\u2028a line separator\rand a CR\nlast".encode())
    assert embed(model_dir, inp, tmp_path / "out.parquet") == 4
    assert pq.read_table(tmp_path / "out.parquet").column("text").to_pylist() == [
        "first",
        "",
        "third has\u2028a line separator\rand a CR",
        "last",
    ]


def test_an_empty_input_gives_an_empty_table(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("")
    assert embed(model_dir, tmp_path / "in.txt", tmp_path / "out.parquet") == 0
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 0


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.txt", None, "missing.txt: no such file"),
        ("in.docx", "x", "in.docx: unknown input type '.docx'"),
        ("in.jsonl", '{"text": "a"}\n{"text": "b"\n', "in.jsonl:2: not valid JSON"),
        (
            "in.jsonl",
            '{"text": "a"}\n\n{"sentence": "b"}\n',
            "in.jsonl:3: expected an object with a string 'text' field",
        ),
        ("in.jsonl", '["a"]\n', "in.jsonl:1: expected an object"),
        ("in.csv", "id,sentence\n1,a\n", "in.csv:1: no 'text' column in the header (id, sentence)"),
        ("in.csv", "id,text\n1,a\n2\n", "in.csv:3: 1 fields, no 'text' column"),
        ("in.tsv", "", "in.tsv:1: no 'text' column in the header (empty)"),
        ("in.txt", b"ok\n\xff\xfe\n", "in.txt:2: not valid UTF-8"),
        ("in.parquet", "not parquet", "in.parquet: not a readable Parquet file"),
    ],
)
def test_bad_inputs_name_the_file_and_line(model_dir, tmp_path, name, content, message):
    inp = tmp_path / name
    if isinstance(content, bytes):
        inp.write_bytes(content)
    elif content is not None:
        inp.write_text(content)
    with pytest.raises(InputError, match=f"^{tmp_path}/" + message.replace("(", r"\(").replace(")", r"\)")):
        embed(model_dir, inp, tmp_path / "out.parquet")
    assert not list(tmp_path.glob("*out.parquet*"))


def test_parquet_without_a_string_text_column_or_with_nulls(model_dir, tmp_path):
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    with pytest.raises(InputError, match=r"ints.parquet: no string column 'text'"):
        embed(model_dir, tmp_path / "ints.parquet", tmp_path / "out.parquet")
    pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "nulls.parquet")
    with pytest.raises(InputError, match=r"nulls.parquet: row 1: 'text' is null"):
        embed(model_dir, tmp_path / "nulls.parquet", tmp_path / "out.parquet")


def test_not_a_model_directory(tmp_path):
    write_input(tmp_path / "in.txt", ["a"])
    with pytest.raises(InputError, match=f"{tmp_path}/nomodel: no such directory"):
        embed(tmp_path / "nomodel", tmp_path / "in.txt", tmp_path / "out.parquet")
    (tmp_path / "nomodel").mkdir()
    with pytest.raises(InputError, match=f"{tmp_path}/nomodel: not a model directory"):
        embed(tmp_path / "nomodel", tmp_path / "in.txt", tmp_path / "out.parquet")


def test_a_failure_after_the_first_chunk_leaves_no_output(model_dir, sentences, tmp_path):
    inp = write_input(tmp_path / "in.jsonl", sentences)
    inp.write_text(inp.read_text() + "{broken\n")
    out = tmp_path / "out.parquet"
    with pytest.raises(InputError, match=f"in.jsonl:{len(sentences) + 1}: not valid JSON"):
        embed(model_dir, inp, out, chunk_rows=10)
    assert list(tmp_path.iterdir()) == [inp]


def test_a_finished_output_is_replaced_only_when_the_new_one_is_complete(model_dir, sentences, tmp_path):
    out = tmp_path / "out.parquet"
    embed(model_dir, write_input(tmp_path / "in.txt", sentences), out)
    bad = write_input(tmp_path / "bad.jsonl", sentences)
    bad.write_text(bad.read_text() + "{broken\n")
    with pytest.raises(InputError):
        embed(model_dir, bad, out, chunk_rows=10)
    assert pq.read_table(out).column("text").to_pylist() == sentences


@pytest.mark.slow  # cpipe embed, a process
def test_cpipe_embed(model_dir, sentences, expected, tmp_path):
    inp = write_input(tmp_path / "in.txt", sentences)
    out = tmp_path / "out.parquet"
    result = cpipe(
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(inp),
        "--output",
        str(out),
        "--batch-size",
        "8",
        "--max-length",
        str(MAX_LENGTH),
        "--pooling",
        "mean",
    )
    assert result.returncode == 0, result.stderr
    assert str(len(sentences)) in result.stdout
    np.testing.assert_allclose(
        np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False)), expected, rtol=1e-4, atol=1e-5
    )
    bad = cpipe("embed", "--model", str(model_dir), "--input", str(tmp_path / "missing.txt"), "--output", str(out))
    assert bad.returncode == 2 and "missing.txt: no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_loading_and_exporting_a_model_print_no_library_noise(tmp_path, capfd):
    """transformers draws a bar per weights file read or written and lists an MLM export's unused LM head and the
    unread pooler as a load report; none of it is the user's business."""
    capfd.readouterr()
    model_dir = tiny_model(tmp_path / "model")
    load_mlm(str(model_dir / HF_DIR))
    Encoder(str(model_dir), max_length=MAX_LENGTH).encode(["a sentence"])
    out, err = capfd.readouterr()
    for noise in ("Loading weights", "Writing model shards", "LOAD REPORT", "UNEXPECTED", "MISSING"):
        assert noise not in out + err


def test_a_model_missing_encoder_weights_is_an_error_naming_them(tmp_path):
    from safetensors.torch import load_file, save_file

    model_dir = tiny_model(tmp_path / "model")
    weights = model_dir / HF_DIR / "model.safetensors"
    state = load_file(weights)
    dropped = next(k for k in state if "layer.0.attention" in k)
    save_file({k: v for k, v in state.items() if k != dropped}, weights, metadata={"format": "pt"})
    with pytest.raises(InputError, match=rf"{model_dir}: .* lacks 1 of the encoder's weights \(.*attention"):
        Encoder(str(model_dir), max_length=MAX_LENGTH)
