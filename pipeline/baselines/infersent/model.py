"""InferSent (Conneau et al., 2017): a BiLSTM with max pooling over fixed word vectors, trained on NLI pairs.

The classifier sees [u, v, |u-v|, u*v] of the two sentence vectors. It is the
reference's default (train_nli.py, `nonlinear_fc 0`, `dpout_fc 0`): three
Linear layers, 4d -> 512 -> 512 -> 3, with no nonlinearity or dropout between
them, so the classifier is linear in those features; the paper's section 3.3
describes an MLP with one 512-unit hidden layer, which the reference builds
only with `nonlinear_fc 1` (then with Tanh and a second hidden layer). Training
follows train_nli.py's defaults: SGD at lr 0.1, lr times 0.99 each epoch,
divided by 5 whenever dev accuracy does not improve, stopped once it falls
below 1e-5 or after 20 epochs, batches of 64, the encoder with the best dev
accuracy kept, gradients clipped at norm 5 (the reference scales the step
instead, the same thing for plain SGD), each sentence wrapped in <s> ... </s>
before words without a vector are dropped.

Padding: the reference's encoder (models.py, version 1, the one train_nli.py
trains and infersent1.pkl ships) packs the sentences, and pad_packed_sequence
fills the steps after a sentence's end with zeros, which then take part in the
max-pool: a sentence shorter than the longest in its batch gets max(x, 0) in
every dimension whose states are all negative. So does ours, in training and
in encoding; encoding sorts sentences by length, as the reference's encode
does, so that few of them have padding at all.

NLI data: the files pipeline.readers.nli reads.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pipeline.baselines.vectors import read_vectors
from pipeline.errors import InputError
from pipeline.progress import tracked
from pipeline.readers.nli import LABELS, NliPairs
from storage import local_copy

BOS, EOS = "<s>", "</s>"
WEIGHTS, VOCAB, SETTINGS = "model.safetensors", "vocab.json", "config.json"
log = logging.getLogger("cpipe")


def tokens(sentence: str, lowercase: bool) -> list[str]:
    return [BOS, *(sentence.lower() if lowercase else sentence).split(), EOS]


@dataclass
class Vectors:
    words: list[str]
    matrix: np.ndarray
    lowercase: bool  # corpus fastText vectors are trained on lowercased text


def corpus_vectors(model_path: str, limit: int | None) -> Vectors:
    """The vocabulary vectors of a fastText model (what it would write as .vec), most frequent first."""
    import fasttext

    with local_copy(model_path) as local:
        model = fasttext.load_model(local)
    words = model.get_words()[:limit]
    return Vectors(words, np.stack([model.get_word_vector(w) for w in words]).astype(np.float32), lowercase=True)


def _first_words(path: str, limit: int) -> set[str]:
    words, dim = set(), None
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            fields = raw.decode("utf-8", errors="replace").rstrip("\r\n").rstrip(" ").split(" ")
            if lineno == 1 and len(fields) == 2 and all(x.isdigit() for x in fields):
                continue  # fastText's "<count> <dim>" header
            dim = dim or max(1, len(fields) - 1)
            words.add(" ".join(fields[:-dim]))  # as read_vectors reads it: GloVe 840B has words with spaces
            if len(words) >= limit:
                break
    return words


def file_vectors(path: str, limit: int | None, needed: set[str]) -> Vectors:
    """A GloVe / fastText text file's vectors for its first `limit` words (these files list frequent words
    first; InferSent's encoder keeps its first K) and for every word of the NLI data."""
    keep = None if limit is None else _first_words(path, limit) | needed
    vocab, matrix = read_vectors(path, keep)
    return Vectors(list(vocab), matrix, lowercase=False)


class BiLstmMax(nn.Module):
    """Sentence vector = max over time of a bidirectional LSTM's states, over fixed word vectors."""

    def __init__(self, vectors: torch.Tensor, hidden: int):
        super().__init__()
        self.embeddings = nn.Embedding.from_pretrained(vectors, freeze=True)
        self.lstm = nn.LSTM(vectors.shape[1], hidden, num_layers=1, bidirectional=True, batch_first=True)

    @property
    def dim(self) -> int:
        return 2 * self.lstm.hidden_size

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids: (batch, time), padded after each sentence's `lengths` (all >= 1) words."""
        packed = pack_padded_sequence(self.embeddings(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        # Zeros after each sentence's end, kept in the max as the reference keeps them (module docstring).
        states, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=ids.shape[1])
        return states.amax(dim=1)


def features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat([u, v, (u - v).abs(), u * v], dim=1)


class NliNet(nn.Module):
    def __init__(self, encoder: BiLstmMax, fc_dim: int, classes: int = len(LABELS)):
        super().__init__()
        self.encoder = encoder
        # train_nli.py's default classifier (nonlinear_fc 0): linear layers with nothing between them.
        self.classifier = nn.Sequential(
            nn.Linear(4 * encoder.dim, fc_dim), nn.Linear(fc_dim, fc_dim), nn.Linear(fc_dim, classes)
        )

    def forward(self, a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.classifier(features(self.encoder(*a), self.encoder(*b)))


class Vocabulary:
    def __init__(self, words: list[str], lowercase: bool):
        self.index = {w: i for i, w in enumerate(words)}
        self.lowercase = lowercase

    def ids(self, sentence: str) -> list[int]:
        """InferSent drops the words that have no vector."""
        return [i for i in map(self.index.get, tokens(sentence, self.lowercase)) if i is not None]


def batch(id_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(x) for x in id_lists])
    ids = torch.zeros(len(id_lists), int(lengths.max()), dtype=torch.long)
    for row, x in enumerate(id_lists):
        ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
    return ids, lengths


@dataclass(frozen=True)
class Settings:
    hidden: int = 256
    fc_dim: int = 512
    batch_size: int = 64
    lr: float = 0.1
    decay: float = 0.99
    shrink: float = 5.0
    min_lr: float = 1e-5
    max_norm: float = 5.0
    epochs: int = 20
    seed: int = 1111


Encoded = tuple[list[list[int]], list[list[int]], list[int]]


def encode_pairs(pairs: NliPairs, vocab: Vocabulary) -> tuple[Encoded, int]:
    """Word ids of both sides, leaving out pairs where a side has no word with a vector (counted)."""
    a, b, y, empty = [], [], [], 0
    for p, h, label in zip(pairs.premise, pairs.hypothesis, pairs.labels):
        ip, ih = vocab.ids(p), vocab.ids(h)
        if not (ip and ih):
            empty += 1
            continue
        a.append(ip)
        b.append(ih)
        y.append(label)
    return (a, b, y), empty


@torch.no_grad()
def accuracy(net: NliNet, data: Encoded, batch_size: int) -> float:
    net.eval()
    a, b, y = data
    correct = 0
    for i in range(0, len(y), batch_size):
        logits = net(batch(a[i : i + batch_size]), batch(b[i : i + batch_size]))
        correct += int((logits.argmax(1) == torch.tensor(y[i : i + batch_size])).sum())
    return correct / max(1, len(y))


def train(train_data: Encoded, dev_data: Encoded, vectors: np.ndarray, s: Settings) -> tuple[BiLstmMax, list[dict]]:
    """The paper's schedule; returns the encoder of the epoch with the best dev accuracy and every epoch's log."""
    torch.manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    net = NliNet(BiLstmMax(torch.from_numpy(vectors), s.hidden), s.fc_dim)
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=s.lr)
    loss_fn = nn.CrossEntropyLoss()
    a, b, y = train_data
    lr, best, best_state, history = s.lr, -1.0, None, []
    for epoch in range(1, s.epochs + 1):
        started = time.monotonic()
        lr = lr * s.decay if epoch > 1 else lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        net.train()
        order, correct, losses = rng.permutation(len(y)), 0, []
        for i in range(0, len(y), s.batch_size):
            idx = order[i : i + s.batch_size]
            target = torch.tensor([y[j] for j in idx])
            logits = net(batch([a[j] for j in idx]), batch([b[j] for j in idx]))
            loss = loss_fn(logits, target)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(params, s.max_norm)
            optimizer.step()
            correct += int((logits.argmax(1) == target).sum())
            losses.append(loss.item())
        dev = accuracy(net, dev_data, s.batch_size)
        history.append(
            {
                "epoch": epoch,
                "lr": lr,
                "loss": float(np.mean(losses)),
                "train_accuracy": correct / len(y),
                "dev_accuracy": dev,
                "seconds": round(time.monotonic() - started, 2),
            }
        )
        log.info(
            "infersent: epoch %d, lr %.3g, loss %.4f, train %.3f, dev %.3f",
            epoch,
            lr,
            history[-1]["loss"],
            history[-1]["train_accuracy"],
            dev,
        )
        if dev > best:
            best = dev
            best_state = {k: v.clone() for k, v in net.encoder.lstm.state_dict().items()}
        else:
            lr /= s.shrink
            if lr < s.min_lr:
                break
    net.encoder.lstm.load_state_dict(best_state)
    return net.encoder, history


def export(encoder: BiLstmMax, vectors: Vectors, out_dir: str) -> None:
    """Weights (the word vectors among them), vocabulary and settings: all an encoder needs, in one directory."""
    os.makedirs(out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in encoder.state_dict().items()}, f"{out_dir}/{WEIGHTS}")
    with open(f"{out_dir}/{VOCAB}", "w", encoding="utf-8") as f:
        json.dump(vectors.words, f, ensure_ascii=False)
    with open(f"{out_dir}/{SETTINGS}", "w") as f:
        json.dump(
            {
                "hidden": encoder.lstm.hidden_size,
                "word_dim": encoder.embeddings.embedding_dim,
                "lowercase": vectors.lowercase,
                "pooling": "max",
            },
            f,
        )


class InferSentEncoder:
    """An exported InferSent encoder, with pipeline.model.exported.Encoder's interface."""

    def __init__(self, path: str):
        with local_copy(path) as local:
            if not os.path.isfile(f"{local}/{SETTINGS}"):
                raise InputError(f"{path}: not an InferSent export (no {SETTINGS})")
            with open(f"{local}/{SETTINGS}") as f:
                exported = json.load(f)  # the export's own file, written by `export`
            with open(f"{local}/{VOCAB}", encoding="utf-8") as f:
                words = json.load(f)
            state = load_file(f"{local}/{WEIGHTS}")
        self.model = BiLstmMax(state["embeddings.weight"], exported["hidden"])
        self.model.load_state_dict(state)
        self.model.eval()
        self.vocab = Vocabulary(words, exported["lowercase"])
        self.dim = self.model.dim

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 128) -> np.ndarray:
        """A sentence with no word that has a vector gets the zero vector."""
        ids = [self.vocab.ids(s) for s in sentences]
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        known = [i for i, x in enumerate(ids) if x]
        known.sort(key=lambda i: -len(ids[i]))  # little padding per batch
        for k in tracked(range(0, len(known), batch_size), "embedding", "batches"):
            rows = known[k : k + batch_size]
            out[rows] = self.model(*batch([ids[i] for i in rows])).numpy()
        return out
