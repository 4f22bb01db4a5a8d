"""`cpipe push MODEL REPO_ID`: a model's sentence-transformers directory uploaded to the Hugging Face Hub, with a
model card whose metadata the Hub and sentence-transformers users read: license, language, `datasets` (the
training corpus and the evaluation sets), tags, library and pipeline tag, `base_model` (the train card's), the
parameter count (`n_parameters`: those that embed, as the leaderboard and MTEB's model_meta.json count them) and
a `model-index` of the model's scores, each under the Hub dataset it was scored on where that is known.

The card is the model's own README.md (train writes it, the leaderboard stage adds its scores beside the
reference row's; pipeline.train.card) with this metadata merged into its front matter and its usage snippet
loading the repository; the artifact itself is never changed. upload() builds what is uploaded without the
network, and `cpipe push --dry-run OUT` writes exactly that to OUT; push() uploads it from a staging directory of
links to the model's files. The scores are the evaluate stage's test scores of the model found under its
artifacts directory (a train dataset's own, or `--artifacts`). The token is huggingface_hub's (HF_TOKEN, or
`hf auth login`'s), handed to it and never printed or written; a network, auth or repository error is one line.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import urllib.parse

import pandas as pd

from pipeline.corpus.credentials import conceal
from pipeline.errors import InputError
from pipeline.locate import HUB_NAME, ST_DIR, why_not_a_model
from pipeline.model.hf_files import weights
from pipeline.readers.names import MtebTask, mteb_task
from storage import DatasetError, complete, dataset_parts, list_datasets, read_manifest, read_table

CARD = "README.md"
DEFAULT_LICENSE = "apache-2.0"
LANGUAGE = "en"  # the corpora and evaluation sets this pipeline reads are English
TAGS = ["sentence-transformers", "sentence-similarity", "feature-extraction", "contrastive-pipeline"]
# A Hub dataset's files, by URL: its id.
HUB_FILE = re.compile(r"^(?:https?://(?:huggingface\.co|hf\.co)/datasets/|hf://datasets/)([^/@]+/[^/@]+)")
# Where another corpus source comes from, by what its name holds: the Hub dataset that publishes the same text.
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


def trained_run(model: str) -> str | None:
    """The train dataset `model` is, or whose sentence-transformers directory it is; None for another model."""
    path = os.path.abspath(model).rstrip("/")
    runs = [path, os.path.dirname(path)] if os.path.basename(path) == ST_DIR else [path]
    return next((run for run in runs if complete(run)), None)


def model_scores(model: str, folder: str, artifacts: str | None) -> pd.DataFrame:
    """The evaluate stage's test rows of `model` (its sentence-transformers directory: `folder`) under `artifacts`
    (a train dataset's own by default): for each (task, metric, protocol), the newest evaluation's; never a
    post-processed row's, which are not the model's scores. Empty when none is known."""
    run = trained_run(model)
    found = _datasets(artifacts or dataset_parts(run or os.path.abspath(model))[0])
    fp = os.path.basename(run) if run else None
    here = {os.path.realpath(model), os.path.realpath(folder)}
    frames = []
    for d in sorted(found, key=lambda d: d.get("created") or 0):
        try:
            manifest = read_manifest(d["path"])
        except DatasetError:  # a damaged dataset elsewhere in the artifacts is no reason to stop here
            continue
        spec = manifest.get("config", {}).get("spec")
        if not isinstance(spec, dict) or spec.get("postprocess"):
            continue
        path = spec.get("path")
        if (fp is not None and manifest.get("inputs", {}).get("model") == fp) or (
            isinstance(path, str) and os.path.realpath(path) in here
        ):
            frames.append(read_table(d["path"]).to_pandas())
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[(rows["split"] == "test") & (rows["subset"] == "all") & ~rows["metric"].isin(NOT_SCORES)]
    return rows.drop_duplicates(["task", "metric", "protocol"], keep="last")


def corpus_names(run: str | None) -> list[str]:
    """What the train dataset `run` was trained on, found by walking its inputs' manifests to the corpus stage's
    (the one with `sources`): each source's name (source_name); [] for a model not trained here."""
    if run is None:
        return []
    paths = {d["fingerprint"]: d["path"] for d in _datasets(dataset_parts(run)[0])}
    seen, queue, names = set(), [run], []
    while queue:
        manifest = read_manifest(queue.pop())
        names += [source_name(str(source)) for source in manifest.get("config", {}).get("sources") or []]
        for fp in manifest.get("inputs", {}).values():
            if isinstance(fp, str) and fp in paths and fp not in seen:
                seen.add(fp)
                queue.append(paths[fp])
    return list(dict.fromkeys(names))


def source_name(source: str) -> str:
    """A corpus source as the card's `datasets` names it: the Hub dataset a Hub URL's file is of, or that publishes
    a known corpus (HUB_DATASETS); another URL without its credentials and query (a signed URL's signature);
    "local: <name>" for a local file or directory, whose path is the user's business."""
    if hub := HUB_FILE.match(source):
        return hub[1]
    if known := next((hub for key, hub in HUB_DATASETS.items() if key in source), None):
        return known
    parts = urllib.parse.urlsplit(source)
    if parts.scheme and parts.netloc:
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    return f"local: {os.path.basename(source.rstrip('/'))}"


def evaluation_sets(scores: pd.DataFrame) -> list[str]:
    """The sets the model was scored on: the Hub dataset a task is (pipeline.readers.names.MTEB_STS, at its size),
    else "local: <task>"."""
    tasks = dict.fromkeys(zip(scores["task"], scores["n"])) if len(scores) else {}
    return list(dict.fromkeys(known.dataset if (known := _mteb(t, n)) else f"local: {t}" for t, n in tasks))


def _mteb(task, n) -> MtebTask | None:
    return mteb_task(str(task), None if pd.isna(n) else int(n))


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
        known = _mteb(row.task, row.n)
        # x 100, as the leaderboard and the card's own table show them
        results.append(
            EvalResult(
                task_type=task,
                dataset_type=known.dataset if known else str(row.task),
                dataset_name=str(row.task),
                dataset_config="default" if known else None,
                dataset_split="test",
                dataset_revision=known.revision if known else None,
                metric_type=f"{row.protocol}_{row.metric}".lower(),
                metric_name=f"{row.metric} x 100 ({row.protocol})",
                metric_value=round(float(row.value) * 100, 2),
            )
        )
    return results


# The usage snippet's model, in our train card ("path/to/this/directory") and sentence-transformers' own
# ("sentence_transformers_model_id"): on the Hub, the repository.
SNIPPET = re.compile(r"""SentenceTransformer\((["'])[^"'\n]*\1""")


def hub_card(
    card_text: str, repo_id: str, license: str | None, datasets: list[str], scores: pd.DataFrame, parameters=None
) -> str:
    """`card_text` (a README.md, with or without front matter) with the Hub's metadata set in its front matter:
    `license` (else the card's own, else DEFAULT_LICENSE), language, `datasets` added to its own, TAGS added to its
    tags, the library and pipeline tag, `n_parameters` (`parameters`: pipeline.model.hf_files.weights, the
    parameters that embed) and a model-index of `scores` (model_scores) where there are any; its usage snippet
    loads `repo_id`."""
    from huggingface_hub import ModelCard

    card = ModelCard(SNIPPET.sub(f'SentenceTransformer("{repo_id}"', card_text), ignore_metadata_errors=True)
    data = card.data
    data.license = license or data.license or DEFAULT_LICENSE
    data.language = data.language or [LANGUAGE]
    if datasets:
        data.datasets = list(dict.fromkeys([*(data.datasets or []), *datasets]))
    data.tags = list(dict.fromkeys([*(data.tags or []), *TAGS]))
    data.library_name, data.pipeline_tag = "sentence-transformers", "sentence-similarity"
    if parameters is not None:
        data.n_parameters = parameters.embedding
    if results := _results(scores):
        data.model_name, data.eval_results = repo_id.rsplit("/", 1)[-1], results
    return str(card)


def upload(model: str, repo_id: str, license: str | None = None, artifacts: str | None = None) -> tuple[str, str]:
    """What `cpipe push` uploads, made without the network: `model`'s sentence-transformers directory and the text
    of its Hub card (hub_card), which replaces the directory's README.md."""
    if not HUB_NAME.match(repo_id) or "/" not in repo_id:
        raise InputError(f"{repo_id}: not a Hub repository id (owner/name)")
    folder = st_folder(model)
    scores = model_scores(model, folder, artifacts)
    datasets = [*corpus_names(trained_run(model)), *evaluation_sets(scores)]
    card = hub_card(_read(os.path.join(folder, CARD)), repo_id, license, datasets, scores, weights(folder))
    return folder, card


def staged(folder: str, card: str, stage: str, place=os.symlink) -> None:
    """`stage` (an empty directory) holding every file of `folder` but its card and hidden files, placed by
    `place(source, target)` (links for the upload, copies for a dry run), and `card` as README.md."""
    for top, dirs, files in os.walk(folder):
        rel = os.path.relpath(top, folder)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        os.makedirs(os.path.join(stage, rel), exist_ok=True)
        for name in files:
            if rel == "." and name == CARD or name.startswith("."):
                continue
            place(os.path.abspath(os.path.join(top, name)), os.path.join(stage, rel, name))
    with open(os.path.join(stage, CARD), "w", encoding="utf-8") as f:
        f.write(card)


def dry_run(model: str, repo_id: str, out: str, license: str | None = None, artifacts: str | None = None) -> None:
    """Write to `out` (a new directory) exactly the folder `push` would upload to `repo_id`; nothing is sent. It
    appears whole or not at all."""
    folder, card = upload(model, repo_id, license, artifacts)
    out = out.rstrip("/") or out
    if os.path.lexists(out):
        raise InputError(f"{out}: already exists (--dry-run writes a new directory)")
    parent = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".cpipe-push-", dir=parent)
    except OSError as e:
        raise InputError(f"{out}: cannot write there ({e.strerror or e})") from None
    try:
        staged(folder, card, tmp, shutil.copyfile)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def push(
    model: str, repo_id: str, private: bool = False, license: str | None = None, artifacts: str | None = None
) -> str:
    """Upload what `upload` makes to `repo_id` (created if need be); returns the commit's URL. Every failure is
    one InputError line, without the token: a network error (no route, no DNS, an unreachable HF_ENDPOINT, a
    timeout), an auth or repository error the Hub answers."""
    folder, card = upload(model, repo_id, license, artifacts)
    import httpx
    import huggingface_hub
    from huggingface_hub import constants

    token = huggingface_hub.get_token()
    if not token:
        raise InputError("no Hugging Face token: set HF_TOKEN or log in with `hf auth login`")
    api = huggingface_hub.HfApi(token=token)
    endpoint = conceal(constants.ENDPOINT)
    with tempfile.TemporaryDirectory(prefix="cpipe-push-") as stage:
        staged(folder, card, stage)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id,
                folder_path=stage,
                commit_message="Upload a sentence encoder trained by contrastive-pipeline",
            )
        # HfHubHTTPError (auth, repository) is an httpx.HTTPError, as are the transport's (connect, DNS, timeout)
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as e:
            said = conceal(_first_line(e)).replace(token, "***")
            raise InputError(f"push to {repo_id} at {endpoint} failed: {said}") from None
    return str(commit.commit_url if hasattr(commit, "commit_url") else commit)


def _first_line(e: BaseException) -> str:
    return next(iter(str(e).strip().splitlines()), type(e).__name__)


def _read(file: str) -> str:
    if not os.path.isfile(file):
        return ""
    with open(file, encoding="utf-8") as f:
        return f.read()
