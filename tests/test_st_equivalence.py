"""Our STS scoring of a sentence-transformers directory agrees with sentence-transformers' own evaluator.

Both sides load the same directory, ours through `pipeline.model.exported.Encoder` (no
code of ours on sentence-transformers' side): our export's `sentence-transformers/`
(mean pooling) and a plain BERT wrapped as `[Transformer, Pooling(cls)]`.
STS-B is the shared data's when CPIPE_SHARED_DATA is set, else a tiny one made here.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer, models
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator
from transformers import AutoModel, BertConfig

from pipeline.evaluate.sts import score_sts
from pipeline.model.exported import Encoder
from pipeline.model.transformer import ST_DIR
from pipeline.readers.sts import find_sts
from tests.conftest import SHARED, WORDS
from tests.helpers import MAX_LENGTH, tiny_model, tiny_tokenizer


def write_stsb(root: Path, n_pairs: int = 300, seed: int = 2) -> Path:
    """STS-B's layout: pairs of made-up words that share a prefix, scored by how much they share.

    No pair is two copies of one sentence: its cosine is 1 on our side (a sentence is embedded once)
    and 1 +- float32 rounding on theirs, and such ties would be ranked apart by noise.
    """
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n_pairs):
        ids = rng.integers(len(WORDS), size=int(rng.integers(6, 16)))
        keep = int(rng.integers(0, len(ids)))
        # Each replaced word differs from the one it replaces, so the two sentences always differ.
        other = (ids[keep:] + rng.integers(1, len(WORDS), size=len(ids) - keep)) % len(WORDS)
        words = [WORDS[j] for j in ids]
        lines.append(
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{5 * keep / len(words):.3f}\t"
            f"{' '.join(words)}\t{' '.join(words[:keep] + [WORDS[j] for j in other])}"
        )
    (root / "STSBenchmark").mkdir(parents=True)
    (root / "STSBenchmark" / "sts-test.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def stsb_test(tmp_path_factory):
    data_dir = Path(SHARED) / "eval" / "senteval" if SHARED else write_stsb(tmp_path_factory.mktemp("eval"))
    subsets, _ = find_sts(data_dir)
    (test,) = [s for s in subsets if s.task == "STSB" and s.split == "test"]
    return test


def export_st_dir(tmp_path: Path) -> Path:
    return tiny_model(tmp_path / "export") / ST_DIR


def plain_st_dir(tmp_path: Path) -> Path:
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    # At BERT's usual init (0.02) a 1-layer [CLS] state hardly depends on the sentence: every cosine is
    # 1 - 1e-6 and the ranking is float32 noise. A wide init spreads them.
    bert = AutoModel.from_config(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=MAX_LENGTH,
            type_vocab_size=1,
            pad_token_id=tokenizer.pad_token_id,
            initializer_range=0.5,
        )
    )
    bert.save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    word = models.Transformer(str(tmp_path / "bert"), max_seq_length=MAX_LENGTH)
    st = SentenceTransformer(
        modules=[word, models.Pooling(word.get_embedding_dimension(), pooling_mode="cls")], device="cpu"
    )
    st.save(str(tmp_path / "st"))
    return tmp_path / "st"


@pytest.mark.parametrize("build, pooling", [(export_st_dir, "mean"), (plain_st_dir, "cls")])
def test_our_sts_b_spearman_matches_sentence_transformers(build, pooling, stsb_test, tmp_path):
    st_dir = build(tmp_path)
    st = SentenceTransformer(str(st_dir), device="cpu")
    ours = Encoder(str(st_dir), max_length=st.max_seq_length, device="cpu")
    assert ours.pooling == pooling

    rows = score_sts(lambda sentences: ours.encode(sentences, batch_size=64), [stsb_test])
    # Agreement means something only if the similarities differ by far more than float32 rounding.
    a, b = ours.encode(stsb_test.sent1), ours.encode(stsb_test.sent2)
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosines.std() > 1e-3
    (spearman,) = [
        r["value"] for r in rows if r["split"] == "test" and r["protocol"] == "cosine" and r["metric"] == "spearman"
    ]
    evaluator = EmbeddingSimilarityEvaluator(
        stsb_test.sent1,
        stsb_test.sent2,
        stsb_test.gold.tolist(),
        batch_size=64,
        main_similarity="cosine",
        name="sts-test",
        write_csv=False,
    )
    theirs = evaluator(st)[evaluator.primary_metric]
    assert evaluator.primary_metric == "sts-test_spearman_cosine"
    assert spearman == pytest.approx(theirs, abs=1e-4)
