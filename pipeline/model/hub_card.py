"""`cpipe push MODEL REPO_ID`: a model's sentence-transformers directory uploaded to the Hugging Face Hub, with a
model card whose metadata the Hub reads (license, language, datasets, tags, library, pipeline tag and a
`model-index` of the model's scores).

The card is the model's own README.md (train writes it, the leaderboard stage adds its scores; pipeline.train.card)
with this metadata merged into its front matter; the artifact itself is never changed: the upload is made from a
staging directory of links to the model's files and the new card. The scores are the evaluate stage's test scores
of the model found under its artifacts directory (a train dataset's own, or `--artifacts`). The token is
huggingface_hub's (HF_TOKEN, or `hf auth login`'s), handed to it and never printed or written.
"""

from __future__ import annotations

import math
import os
import tempfile

import pandas as pd

from pipeline.errors import InputError
from pipeline.locate import HUB_NAME, ST_DIR, why_not_a_model
from storage import DatasetError, complete, dataset_parts, list_datasets, read_manifest, read_table

CARD = "README.md"
DEFAULT_LICENSE = "apache-2.0"
LANGUAGE = "en"  # the corpora and evaluation sets this pipeline reads are English
TAGS = ["sentence-transformers", "sentence-similarity", "feature-extraction", "contrastive-pipeline"]
# Where a corpus source comes from, by what its name holds: the Hub dataset that publishes the same text.
HUB_DATASETS = {
    "urlsf_subset": "Skylion007/openwebtext",
    "openwebtext": "Skylion007/openwebtext",
    "pages-articles": "wikimedia/wikipedia",
    "wikimedia/wikipedia": "wikimedia/wikipedia",
}
SIMILARITY_METRICS = {"spearman", "pearson"}
CLASSIFICATION_METRICS = {"accuracy", "f1"}
NOT_SCORES = {"alignment", "uniformity", "sentence_anisotropy", "anisotropy"}  # analysis: no Hub benchmark result


def st_folder(model: str) -> str:
    """The sentence-transformers directory of `model`: a train (or init) dataset's, or `model` itself."""
    for folder in (os.path.join(model, ST_DIR), model):
        if os.path.isfile(os.path.join(folder, "modules.json")):
            if why := why_not_a_model(folder):
                raise InputError(why)
            return folder
    raise InputError(
        f"{model}: no sentence-transformers model here (a train dataset directory, or a directory holding modules.json)"
    )


def _datasets(root: str) -> list[dict]:
    try:
        return list_datasets(root)
    except Exception:  # noqa: BLE001 - no artifacts there: a model directory outside any, with nothing known
        return []


def model_scores(model: str, artifacts: str | None) -> pd.DataFrame:
    """The evaluate stage's test rows of `model` under `artifacts` (a dataset's own by default): for each (task,
    metric, protocol), the newest evaluation's. Empty when none is known."""
    found = _datasets(artifacts or dataset_parts(os.path.abspath(model))[0])
    fp = os.path.basename(os.path.abspath(model).rstrip("/"))
    here = os.path.realpath(model)
    frames = []
    for d in sorted(found, key=lambda d: d.get("created") or 0):
        try:
            manifest = read_manifest(d["path"])
        except DatasetError:  # a damaged dataset elsewhere in the artifacts is no reason to stop here
            continue
        spec = manifest.get("config", {}).get("spec") or {}
        ours = manifest.get("inputs", {}).get("model") == fp or (
            isinstance(spec.get("path"), str) and os.path.realpath(spec["path"]) == here
        )
        if ours and "spec" in manifest.get("config", {}):
            frames.append(read_table(d["path"]).to_pandas())
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[(rows["split"] == "test") & (rows["subset"] == "all") & ~rows["metric"].isin(NOT_SCORES)]
    return rows.drop_duplicates(["task", "metric", "protocol"], keep="last")


def corpus_sources(model: str) -> list[str]:
    """The Hub datasets of the corpus a train dataset's model was trained on, found by walking its inputs'
    manifests to the corpus stage's (the one with `sources`); [] when unknown (a local corpus names none)."""
    if not complete(model):
        return []
    root = dataset_parts(os.path.abspath(model))[0]
    paths = {d["fingerprint"]: d["path"] for d in _datasets(root)}
    seen, queue, names = set(), [os.path.abspath(model)], []
    while queue:
        manifest = read_manifest(queue.pop())
        for source in manifest.get("config", {}).get("sources") or []:
            names += [hub for key, hub in HUB_DATASETS.items() if key in str(source)]
        for fp in manifest.get("inputs", {}).values():
            if isinstance(fp, str) and fp in paths and fp not in seen:
                seen.add(fp)
                queue.append(paths[fp])
    return sorted(set(names))


def _results(scores: pd.DataFrame) -> list:
    from huggingface_hub import EvalResult

    results = []
    for row in scores.itertuples():
        if row.value is None or isinstance(row.value, float) and math.isnan(row.value):
            continue
        task = (
            "sentence-similarity"
            if row.metric in SIMILARITY_METRICS
            else "text-classification"
            if row.metric in CLASSIFICATION_METRICS
            else "feature-extraction"
        )
        # x 100, as the leaderboard and the card's own table show them
        results.append(
            EvalResult(
                task_type=task,
                dataset_type=str(row.task),
                dataset_name=str(row.task),
                dataset_split="test",
                metric_type=f"{row.protocol}_{row.metric}".lower(),
                metric_name=f"{row.metric} x 100 ({row.protocol})",
                metric_value=round(float(row.value) * 100, 2),
            )
        )
    return results


def hub_card(card_text: str, repo_id: str, license: str | None, datasets: list[str], scores: pd.DataFrame) -> str:
    """`card_text` (a README.md, with or without front matter) with the Hub's metadata set in its front matter:
    `license` (else the card's own, else DEFAULT_LICENSE), language, `datasets`, TAGS added to its tags, the
    library and pipeline tag, and a model-index of `scores` (model_scores) where there are any."""
    from huggingface_hub import ModelCard

    card = ModelCard(card_text, ignore_metadata_errors=True)
    data = card.data
    data.license = license or data.license or DEFAULT_LICENSE
    data.language = data.language or [LANGUAGE]
    if datasets:
        data.datasets = sorted(set(data.datasets or []) | set(datasets))
    data.tags = list(dict.fromkeys([*(data.tags or []), *TAGS]))
    data.library_name, data.pipeline_tag = "sentence-transformers", "sentence-similarity"
    if results := _results(scores):
        data.model_name, data.eval_results = repo_id.rsplit("/", 1)[-1], results
    return str(card)


def _staged(folder: str, stage: str, card: str) -> None:
    """`stage` holding links to every file of `folder` but its card, and `card` as README.md."""
    for top, dirs, files in os.walk(folder):
        rel = os.path.relpath(top, folder)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        os.makedirs(os.path.join(stage, rel), exist_ok=True)
        for name in files:
            if rel == "." and name == CARD or name.startswith("."):
                continue
            os.symlink(os.path.abspath(os.path.join(top, name)), os.path.join(stage, rel, name))
    with open(os.path.join(stage, CARD), "w", encoding="utf-8") as f:
        f.write(card)


def push(
    model: str, repo_id: str, private: bool = False, license: str | None = None, artifacts: str | None = None
) -> str:
    """Upload `model`'s sentence-transformers directory and its Hub card to `repo_id` (created if need be);
    returns the commit's URL. Every failure is one InputError line, without the token."""
    if not HUB_NAME.match(repo_id) or "/" not in repo_id:
        raise InputError(f"{repo_id}: not a Hub repository id (owner/name)")
    folder = st_folder(model)
    import huggingface_hub
    from huggingface_hub import errors

    token = huggingface_hub.get_token()
    if not token:
        raise InputError("no Hugging Face token: set HF_TOKEN or log in with `hf auth login`")
    card = hub_card(
        _read(os.path.join(folder, CARD)), repo_id, license, corpus_sources(model), model_scores(model, artifacts)
    )
    api = huggingface_hub.HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="cpipe-push-") as stage:
        _staged(folder, stage, card)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id,
                folder_path=stage,
                commit_message="Upload a sentence encoder trained by contrastive-pipeline",
            )
        except (errors.HfHubHTTPError, OSError, ValueError) as e:
            raise InputError(f"push to {repo_id} failed: {_first_line(e).replace(token, '***')}") from None
    return str(commit.commit_url if hasattr(commit, "commit_url") else commit)


def _first_line(e: BaseException) -> str:
    return next(iter(str(e).strip().splitlines()), type(e).__name__)


def _read(file: str) -> str:
    if not os.path.isfile(file):
        return ""
    with open(file, encoding="utf-8") as f:
        return f.read()
