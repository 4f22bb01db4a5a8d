"""The model card (README.md) of a trained model's `sentence-transformers/` directory.

Train writes it at export; the leaderboard stage rewrites it with the model's scores (pipeline.leaderboard.cards).
sentence-transformers reads a model directory's README.md as its card and, on a later save(), keeps a card that its
trainer did not generate as it is, so this card travels with the model. The card is documentation: no fingerprint,
manifest entry or loader depends on its content, so rewriting it inside a finished dataset changes nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import NamedTuple

from pipeline.model.hf_files import weights
from pipeline.objectives import names, objective
from pipeline.train.config import TrainConfig
from pipeline.train.losses import LOSSES
from storage import complete, dataset_parts, dataset_path, put_file, read_manifest

CARD = "README.md"


def train_info(run: TrainConfig, inputs: dict, extra: dict, model_config, exported: str) -> dict:
    """What the card says of a train run: its settings, the manifests of its inputs (the init and pairs datasets),
    its results (`extra`: steps, final loss, best dev score where evaluated) and the parameters of its export
    (`exported`: the sentence-transformers directory). JSON-able, so the run's manifest keeps it for the
    leaderboard's rewrite."""
    init = read_manifest(inputs["init"])
    pairs = read_manifest(inputs["pairs"])
    # A run that continues another (init_from) starts from that run's train dataset, whose manifest keeps its card.
    parent = init.get("card")
    model = init["config"]
    # The datasets the pairs were made from (the filter stage's documents; CERT's back-translations), which a
    # manifest names by fingerprint, beside the pairs in the same artifacts.
    root, stages = dataset_parts(inputs["pairs"])[0], objective(run.objective).inputs
    sources = {name: _dataset(root, stages[name], fp) for name, fp in sorted(pairs["inputs"].items()) if name in stages}
    return {
        "objective": run.objective,
        "augmentation": run.views,
        "contrastive": run.contrastive,
        "loss": run.loss,
        "temperature": run.temperature,
        "mlm": run.mlm,
        "mlm_probability": run.mlm_probability,
        "pooling": run.pooling,
        "recipe": ran_recipe(run.recipe(), run.model_dump(), extra.get("steps"), pairs),
        "base_model": parent["base_model"] if parent else model.get("base"),
        "architecture": parent["architecture"] if parent else _architecture(model.get("base"), model_config),
        **parameters(exported),
        "continues": {"fingerprint": init["fingerprint"], "recipe": parent["recipe"]} if parent else None,
        "pairs": {"fingerprint": pairs["fingerprint"], "rows": pairs["rows"]},
        "sources": sources,
        **{k: extra.get(k) for k in ("steps", "final_loss", "best_step", "best_dev_spearman", "selected_by")},
    }


def _dataset(root: str, stage: str, fp: str) -> dict:
    path = dataset_path(root, stage, fp)
    return {"fingerprint": fp, "stage": stage, "rows": read_manifest(path).get("rows") if complete(path) else None}


def parameters(st_dir: str) -> dict:
    """The card's parameter counts of the model exported to `st_dir` (pipeline.model.hf_files.weights): those that
    embed, as the leaderboard counts them, and all its weights files hold. The init stage's count is not the
    model's: it includes the MLM head, which is not exported."""
    counted = weights(st_dir)
    return {"parameters": counted.embedding, "stored_parameters": counted.stored} if counted else {}


def ran_recipe(recipe: str, train: dict, steps: int | None, pairs: dict | None) -> str:
    """`recipe` (TrainConfig.recipe, or an evaluate row's: it, then "from <parent>" and the dev selection) stating
    what ran: its configured steps (max_steps, a ceiling the pairs may stop short of) replaced by ran()'s steps
    taken, pairs read and what those were made from. `train`: the run's settings (a train manifest's
    config["train"]); `pairs`: its pairs dataset's manifest, None when that dataset is gone."""
    if steps is None:
        return recipe
    planned, taken = f", {train.get('max_steps') or 'all'} steps", ran(train, steps, pairs)
    if taken in recipe:  # already restated (a card written since)
        return recipe
    # A recipe of another layout says what ran after what was configured, never only what was configured.
    return recipe.replace(planned, f", {taken}", 1) if planned in recipe else f"{recipe}; ran {taken}"


def ran(train: dict, steps: int, pairs: dict | None) -> str:
    """ "27 steps (max_steps 1000) on 1,728 of 1,750 pairs from 20,000 sentences of 96 documents": the steps taken,
    the pairs they read (batch_size x grad_accumulation a step) of the pairs dataset's, and what those were made
    from (drawn)."""
    ceiling = train.get("max_steps")
    text = f"{steps} steps" + (f" (max_steps {ceiling})" if ceiling and steps < ceiling else "")
    if pairs is None or pairs.get("rows") is None:
        return text
    used = min(steps * pairs_per_step(train), pairs["rows"])
    source = drawn(pairs)[0]
    return f"{text} on {used:,} of {pairs['rows']:,} pairs" + (f" from {source}" if source else "")


def pairs_per_step(train: dict) -> int:
    """How many pairs a step of the run with settings `train` reads: batch_size x grad_accumulation."""
    return train["batch_size"] * train.get("grad_accumulation", 1)


def drawn(pairs: dict) -> tuple[str | None, str | None]:
    """What a pairs dataset (its manifest) was made from, and a key two datasets share when made from the same
    data: the corpus documents drawn (record_drawn of pipeline.corpus.sentences: "20,000 sentences of 96
    documents", the digest of their ids) or supervised SimCSE's NLI triplets (a digest of their files). (None,
    None) for pairs made before their manifest recorded it."""
    if (record := pairs.get("drawn")) is not None:
        documents = f"{record['documents']:,} documents"
        sentences = record.get("sentences")
        return (
            documents if sentences is None else f"{sentences:,} sentences of {documents}",
            record["documents_digest"],
        )
    if "triplets" in pairs:
        files = json.dumps(pairs.get("config", {}).get("files"), sort_keys=True, default=str)
        return f"{pairs['triplets']:,} NLI triplets", f"nli-{hashlib.sha256(files.encode()).hexdigest()[:16]}"
    return None, None


def _architecture(base: str | None, config) -> str:
    """From the trained model's own (transformers) config, which says what was trained whatever the stage configs say."""
    shape = (
        f"{config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
        f"{config.num_attention_heads} heads, feed-forward {config.intermediate_size}"
    )
    kind = type(config).__name__.removesuffix("Config")
    return f"{base} (continued pretraining; {kind}: {shape})" if base else f"{kind} from scratch: {shape}"


class Reference(NamedTuple):
    """The leaderboard row a model is compared with (evaluate.compare_to, else the untrained encoder), and per
    column its score and the model's difference to it, as the card shows them."""

    name: str
    scores: dict[str, str]
    differences: dict[str, str]


def render(info: dict, scores: dict[str, str] | None = None, reference: Reference | None = None) -> str:
    """The card: Hub metadata, then what the model was trained from and how, then its leaderboard scores
    (`scores`: leaderboard column -> its value as text, score_texts) beside the reference row's (`reference`)
    or a line saying it has none yet."""
    return "\n".join(
        [
            *_metadata(info),
            "",
            f"# {info.get('name') or info['objective']}: a contrastive sentence encoder",
            "",
            f"Trained by contrastive-pipeline. Sentence embeddings are the {info['pooling']}-pooled last layer.",
            "",
            "## Training",
            "",
            "| | |",
            "|---|---|",
            *(f"| {k} | {v} |" for k, v in _training(info)),
            "",
            "## Evaluation",
            "",
            *_scores(scores, reference),
            "",
            "## Usage",
            "",
            "```python",
            "from sentence_transformers import SentenceTransformer",
            "",
            'model = SentenceTransformer("path/to/this/directory")',
            'embeddings = model.encode(["A sentence.", "Another one."])',
            "```",
            "",
        ]
    )


def _metadata(info: dict) -> list[str]:
    tags = [
        "sentence-transformers",
        "sentence-similarity",
        "feature-extraction",
        "contrastive-learning",
        info["objective"],
    ]
    base = info.get("base_model")
    # The Hub's base_model names a Hub model; a local directory is not one.
    hub_base = base and not base.startswith(("/", ".", "~")) and not os.path.isdir(base)
    return [
        "---",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "tags:",
        *(f"- {t}" for t in tags),
        *([f"base_model: {base}"] if hub_base else []),
        "---",
    ]


def _training(info: dict) -> list[tuple[str, str]]:
    # How the objective makes its positive pairs, as its paper does; a card of an objective since removed names it.
    name = info["objective"]
    trained = objective(name).title if name in names() else name
    if info.get("augmentation"):
        trained += f" ({info['augmentation']})"
    loss = info["loss"]  # a card of a loss since removed names it
    loss = (LOSSES[loss].label if loss in LOSSES else loss) if info["contrastive"] else "no contrastive loss"
    if info["contrastive"] and info["temperature"] is not None:  # TSDAE's loss has none
        loss += f", temperature {info['temperature']:g}"
    if info["mlm"]:
        loss += f" + masked language modelling ({info['mlm_probability']:.0%} of tokens, 80/10/10)"
    pairs = info["pairs"]
    sources = "; ".join(
        f"{s['stage']} {name} `{s['fingerprint']}`" + (f" ({s['rows']:,} rows)" if s.get("rows") is not None else "")
        for name, s in info["sources"].items()
    )
    best = (
        f"step {info['best_step']} by {info['selected_by']}"
        if info.get("selected_by")
        else f"{info['best_dev_spearman']:.4f} Spearman at step {info['best_step']}"
        if info.get("best_dev_spearman") is not None
        else "not evaluated during training"
    )
    rows = [("base model", info.get("base_model") or "none: from scratch"), ("architecture", info["architecture"])]
    if info.get("continues"):
        parent = info["continues"]
        rows.append(("continues", f"train run `{parent['fingerprint']}` ({parent['recipe']})"))
    if info.get("parameters"):
        rows.append(("parameters", _parameters(info)))
    steps = f"{info['steps']}" + (
        f" (final loss {info['final_loss']:.4f})" if info.get("final_loss") is not None else ""
    )
    return rows + [
        ("objective", trained),
        ("loss", loss),
        ("recipe", info["recipe"]),
        (
            "training pairs",
            f"`{pairs['fingerprint']}`: {pairs['rows']:,} pairs" + (f", made from {sources}" if sources else ""),
        ),
        ("steps", steps),
        ("selected", best),
    ]


def _parameters(info: dict) -> str:
    text = f"{info['parameters']:,}"
    stored = info.get("stored_parameters")
    if stored is None or stored == info["parameters"]:
        return text
    return (
        f"{text} that embed, as the leaderboard counts them (the encoder and any kept head); the weights files "
        f"hold {stored:,}, with the {stored - info['parameters']:,} of a pooler that mean or [CLS] pooling never reads"
    )


def _scores(scores: dict[str, str] | None, reference: Reference | None = None) -> list[str]:
    if not scores:
        return ["Not scored yet: the pipeline's leaderboard stage writes this model's scores here."]
    said = (
        "Scores from the pipeline's leaderboard (Spearman or accuracy x 100 on test; the leaderboard's "
        "notes give each column's protocol)."
    )
    if reference is None:
        return [said, "", "| column | score |", "|---|---:|", *(f"| {c} | {text} |" for c, text in scores.items())]
    said += (
        f" Beside them the leaderboard's reference row, {reference.name}, and this model's difference to it with "
        "its 95% interval (the paired bootstrap over the test items, and the seeds where either row has several; "
        "none where the test items were not kept); ▲/▼ where the leaderboard marks it after its correction for "
        "many comparisons."
    )
    return [
        said,
        "",
        f"| column | score | {reference.name} | difference [95% interval] |",
        "|---|---:|---:|---:|",
        *(f"| {c} | {text} | {reference.scores[c]} | {reference.differences[c]} |" for c, text in scores.items()),
    ]


def write_card(
    st_dir: str, info: dict, scores: dict[str, str] | None = None, reference: Reference | None = None
) -> None:
    """Replace `<st_dir>/README.md` (any fsspec URL) whole: readers see the old card or the new one."""
    with tempfile.TemporaryDirectory(prefix="cpipe-card-") as tmp:
        with open(f"{tmp}/{CARD}", "w", encoding="utf-8") as f:
            f.write(render(info, scores, reference))
        put_file(f"{tmp}/{CARD}", f"{st_dir.rstrip('/')}/{CARD}")
