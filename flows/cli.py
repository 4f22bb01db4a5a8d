"""`cpipe`: run the pipeline, serve it as a Prefect deployment, submit it to a Ray cluster, embed text,
inspect artifacts."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from contextlib import nullcontext
from typing import NoReturn

import tasks  # noqa: F401  (sets logging before prefect is imported)
from flows.processes import end_with_parent, exit_now
from pipeline import stopping
from pipeline.config import Config
from pipeline.corpus.credentials import concealed
from pipeline.locate import check_models
from pipeline.preflight import USER_ERRORS, configured
from pipeline.ray_session import ray_shutdown
from pipeline.registry import NAMES


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line, saying where the usage is (argparse's own error prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _at_least(minimum: int):
    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return count


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML profile (default: configs/default.yaml)")
    p.add_argument(
        "--corpus", action="append", help="local file or directory; repeat to mix; replaces the profile's sources"
    )
    p.add_argument(
        "--eval-data",
        help="directory of evaluation tasks in SentEval's layout, STS pair files "
        "(sentence1, sentence2, score) and/or retrieval (BEIR), clustering, pairclass and reranking "
        "tasks (docs/evaluation.md), or one pair file; replaces the profile's evaluate.data",
    )
    p.add_argument("--artifacts", help="where stage datasets go (default ./artifacts)")
    p.add_argument("--until", choices=NAMES, help="stop after this stage")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set filter.min_tokens=1024",
    )
    p.add_argument("--ray-address", help="send Ray work to this cluster (ray.address; RAY_ADDRESS works too)")


def _overrides(args) -> list[str]:
    return args.overrides + ([f"ray.address={args.ray_address}"] if args.ray_address else [])


class _NoUserTracebacks(logging.Filter):
    """Prefect logs a failed task's traceback; for bad input the one-line message is the whole story."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], USER_ERRORS):
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_user_errors() -> None:
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(_NoUserTracebacks())


def _run_config(args) -> tuple[dict, Config]:
    """`cpipe run`'s options and config, before the flows' imports (torch, Prefect: seconds): a mistake answers
    at once. Its options are flow parameters, which Prefect stores and prints: their credentials are masked."""
    options = concealed(
        dict(
            config=args.config,
            corpus=args.corpus,
            eval_data=args.eval_data,
            artifacts=args.artifacts,
            until=args.until,
            overrides=_overrides(args),
        )
    )
    return options, configured(**options)


def cmd_plan(args) -> int:
    """What `cpipe run` with these arguments would reuse, rebuild or build; nothing is started or written."""
    from pipeline.plan import as_json, plan, show

    steps = plan(_run_config(args)[1], until=args.until)
    if getattr(args, "json", False):  # `cpipe run --dry-run` has no --json
        print(as_json(steps))
    else:
        show(steps)
    return 0


def cmd_run(args) -> int:
    if args.dry_run:
        return cmd_plan(args)
    options, cfg = _run_config(args)

    from flows.pipeline_flows import checked, full_pipeline

    checked(cfg, until=args.until)  # fail on bad input before Prefect or Ray start; the flow takes it as it is
    _quiet_user_errors()
    started = time.perf_counter()
    full_pipeline(**options, resolved=cfg)
    print(f"cpipe: finished in {time.perf_counter() - started:.1f}s")
    return 0


def serve_deployments(args) -> list:
    """The four flows' deployments, each with the defaults it takes of `cpipe serve`'s options."""
    import inspect

    parameters = {
        k: concealed(v)
        for k, v in dict(
            config=args.config,
            corpus=args.corpus,
            eval_data=args.eval_data,
            artifacts=args.artifacts,
            until=args.until,
            overrides=_overrides(args) or None,
        ).items()
        if v is not None
    }
    cfg = configured(**parameters) if args.corpus and args.eval_data else None  # before the flows' imports, as cmd_run

    from flows.pipeline_flows import checked, data_flow, evaluate_flow, full_pipeline, train_flow

    if cfg is not None:
        checked(cfg, until=args.until)
    # Each flow's deployment gets the defaults it takes (the evaluate flow reads no corpus, say).
    return [
        f.to_deployment(
            name=args.name, parameters={k: v for k, v in parameters.items() if k in inspect.signature(f.fn).parameters}
        )
        for f in (data_flow, train_flow, evaluate_flow, full_pipeline)
    ]


def cmd_serve(args) -> int:
    from flows.serve import serve

    return serve(serve_deployments(args), on_stop=_report_once)


def cmd_evaluate(args) -> int:
    # --set values are YAML: quoted, any path stays the string it is
    results = [f"evaluate.results_dir={json.dumps(args.results_dir)}"] if args.results_dir else []
    options = concealed(
        dict(
            config=args.config, eval_data=args.eval_data, artifacts=args.artifacts, overrides=_overrides(args) + results
        )
    )
    cfg = configured(**options, first="evaluate", models=args.model)  # before the heavy imports, as cmd_run
    check_models(args.model)  # every model exists, holds no code to run, before torch or Prefect is imported

    import fsspec

    from flows.pipeline_flows import checked, evaluate_flow
    from pipeline.evaluate.stage import user_models
    from pipeline.leaderboard.stage import CUMULATIVE

    user_models(args.model)  # their row names, unique
    checked(cfg, first="evaluate")
    _quiet_user_errors()
    evaluate_flow(models=args.model, **options, resolved=cfg)
    with fsspec.open(f"{cfg.artifacts.rstrip('/')}/{CUMULATIVE}.md", "r") as f:
        print(f.read())
    return 0


def cmd_submit(args, run_args: list[str]) -> int:
    from flows.submit import submit

    check = _Parser(prog="cpipe submit", add_help=False)
    _run_options(check)
    check.parse_args(run_args)  # a typo fails here, not minutes later on the cluster
    return submit(args.address, run_args, install=args.install, follow=not args.no_wait)


def cmd_embed(args) -> int:
    from pipeline.model.embed_file import embed_file

    rows = embed_file(
        args.model,
        args.input,
        args.output,
        batch_size=args.batch_size,
        max_length=args.max_length,
        text_column=args.column,
        pooling=args.pooling,
    )
    print(f"cpipe: embedded {rows} rows into {args.output}")
    return 0


def cmd_export(args) -> int:
    from pipeline.model.onnx_export import ExportMismatch, export_onnx

    try:
        difference = export_onnx(args.model, args.onnx)
    except ExportMismatch as e:  # the export is wrong, not the input: exit 1
        print(f"cpipe: error: {e}", file=sys.stderr)
        return 1
    print(
        f"cpipe: exported {args.model} to {args.onnx} (a sentence-transformers directory with onnx/model.onnx; "
        f"onnxruntime's embeddings match PyTorch's within {difference:.1e})"
    )
    return 0


def cmd_push(args) -> int:
    from pipeline.model.hub_card import dry_run, push

    if args.dry_run:
        dry_run(args.model, args.repo_id, args.dry_run, license=args.license, artifacts=args.artifacts)
        print(f"cpipe: wrote {args.dry_run}: the folder and card a push of {args.model} to {args.repo_id} uploads")
        return 0
    url = push(args.model, args.repo_id, private=args.private, license=args.license, artifacts=args.artifacts)
    print(f"cpipe: pushed {args.model} to {url}")
    return 0


def cmd_inspect(args) -> int:
    from storage.inspection import show

    show(args.path, rows=args.rows, order=NAMES, dropped=args.dropped)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the full pipeline locally (embedded Prefect, local Ray)")
    _run_options(p_run)
    p_run.add_argument("--dry-run", action="store_true", help="print the plan (cpipe plan) and exit, running nothing")
    p_run.set_defaults(fn=cmd_run)
    p_plan = sub.add_parser(
        "plan",
        help="say what `cpipe run` with the same options would reuse, rebuild (and why) or build, starting nothing",
    )
    _run_options(p_plan)
    p_plan.add_argument("--json", action="store_true", help="the plan as JSON, a list of steps")
    p_plan.set_defaults(fn=cmd_plan)
    p_serve = sub.add_parser(
        "serve",
        help="serve the deployments data/<name>, train/<name>, evaluate/<name> and "
        "full-pipeline/<name> to a Prefect server",
    )
    _run_options(p_serve)
    p_serve.add_argument(
        "--name",
        default="serve",
        help="deployment name (default: serve; prefect.yaml's are "
        "named local, and stopping serve pauses the deployments it served)",
    )
    p_serve.set_defaults(fn=cmd_serve)
    p_eval = sub.add_parser(
        "evaluate",
        help="score model directories or hub names (HF or sentence-transformers) "
        "and add them to the cumulative leaderboard",
    )
    p_eval.add_argument(
        "--model",
        action="append",
        required=True,
        help="a model directory or hub name; repeat for several; the row is named by its directory "
        "(a run's train dataset: by its run)",
    )
    p_eval.add_argument(
        "--eval-data",
        help="evaluation tasks: a directory in SentEval's layout, STS pair files and/or "
        "retrieval (BEIR), clustering, pairclass and reranking tasks (docs/evaluation.md), or one "
        "pair file (default: the config's evaluate.data, public STS sets)",
    )
    p_eval.add_argument("--config", help="YAML profile (default: configs/default.yaml): the evaluate settings")
    p_eval.add_argument("--artifacts", help="where stage datasets and the leaderboard go (default ./artifacts)")
    p_eval.add_argument(
        "--results-dir",
        help="where MTEB's result files go, <model>/<fingerprint>/<task>.json "
        "(evaluate.results_dir; default: mteb-results/ under the artifacts directory)",
    )
    p_eval.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set evaluate.workers=2",
    )
    p_eval.add_argument("--ray-address", help="send Ray work to this cluster (ray.address; RAY_ADDRESS works too)")
    p_eval.set_defaults(fn=cmd_evaluate)
    p_submit = sub.add_parser(
        "submit",
        help="run the pipeline as a Ray job on a cluster (Ray Jobs API); "
        "every other option is passed to `cpipe run` there",
    )
    p_submit.add_argument("--address", required=True, help="the cluster's dashboard, e.g. http://HOST:8265")
    installs = p_submit.add_mutually_exclusive_group()
    installs.add_argument(
        "--install",
        action="store_true",
        help="have Ray build the job an environment, pip-installing the project's requirements on "
        "each node (minutes and GBs before it starts); by default the job runs in the nodes' own",
    )
    installs.add_argument(
        "--no-install", action="store_true", help=argparse.SUPPRESS
    )  # the default now; scripts have it
    p_submit.add_argument("--no-wait", action="store_true", help="submit and return; do not stream the logs")
    p_submit.set_defaults(fn=cmd_submit)
    p_embed = sub.add_parser("embed", help="embed the sentences of a file with an exported (or any HF/ST) model")
    p_embed.add_argument(
        "--model", required=True, help="a train/init dataset dir, or an HF / sentence-transformers dir"
    )
    p_embed.add_argument("--input", required=True, help=".txt (a sentence a line), .jsonl, .csv, .tsv or .parquet")
    p_embed.add_argument("--output", required=True, help="Parquet file: row, text, embedding")
    p_embed.add_argument("--column", default="text", help="text column of .jsonl/.csv/.tsv/.parquet input")
    p_embed.add_argument("--batch-size", type=_at_least(1), default=128)
    p_embed.add_argument("--max-length", type=_at_least(1), default=128)
    p_embed.add_argument("--pooling", choices=["mean", "cls"], help="default: what the model declares, else mean")
    p_embed.set_defaults(fn=cmd_embed)
    p_export = sub.add_parser(
        "export",
        help="export a model as a sentence-transformers directory with its encoder in ONNX, checked against PyTorch",
    )
    p_export.add_argument("model", help="a train dataset dir, an HF / sentence-transformers dir, or a hub name")
    p_export.add_argument(
        "--onnx",
        required=True,
        metavar="OUT",
        help="a new directory: the sentence-transformers model, onnx/model.onnx (token embeddings), export.json",
    )
    p_export.set_defaults(fn=cmd_export)
    p_push = sub.add_parser(
        "push",
        help="upload a model's sentence-transformers directory and a Hub model card "
        "to the Hugging Face Hub (token: HF_TOKEN or `hf auth login`)",
    )
    p_push.add_argument("model", help="a train dataset dir, or a sentence-transformers dir")
    p_push.add_argument("repo_id", help="the Hub repository, owner/name (created if missing)")
    p_push.add_argument("--private", action="store_true", help="create the repository private")
    p_push.add_argument("--license", help="the card's license (default: the card's own, else apache-2.0)")
    p_push.add_argument(
        "--artifacts",
        help="where to find the model's scores for the card (default: a train dataset's own artifacts directory)",
    )
    p_push.add_argument(
        "--dry-run",
        metavar="OUT",
        help="write the folder and card that would be uploaded to the new directory OUT, and send nothing",
    )
    p_push.set_defaults(fn=cmd_push)
    p_inspect = sub.add_parser("inspect", help="show a stage dataset, or list every dataset under an artifacts dir")
    p_inspect.add_argument("path")
    p_inspect.add_argument("--rows", type=_at_least(0), default=5, help="first rows to show (default 5)")
    p_inspect.add_argument(
        "--dropped",
        action="store_true",
        help="the documents the dataset's stage dropped, each with its reason (filter, decontaminate)",
    )
    p_inspect.set_defaults(fn=cmd_inspect)
    return parser


def _stopped() -> int:
    """After SIGINT or SIGTERM: Ray shut down (the workers of a local instance with it), then one line saying
    how to go on."""
    from pipeline.train.resume import stopped_step

    ray_shutdown()
    step = stopped_step()
    stopping.say(
        "cpipe: " + ("stopped; rerun to resume" if step is None else f"stopped; training resumes from step {step}")
    )
    return 128 + stopping.signum


def _report_once() -> None:
    """A SIGTERM to the run's whole cgroup (systemd's default KillMode, Slurm's scancel) stops Prefect's temporary
    server with the run, and Prefect would retry for two minutes to tell it that the run crashed: past systemd's and
    Slurm's grace before SIGKILL. A stopped run tells the server once; a live server hears it, a dead one is gone."""
    from prefect.settings import get_current_settings

    get_current_settings().client.max_retries = 0


def _drain_run_logs() -> None:
    """Prefect sends a run's logs to its server from a background worker, drained at exit by default: after the
    temporary server's own exit handler has stopped it, so a failed run ended with '--- Error logging to API ---
    All connection attempts failed'. Drained here, while the server is up."""
    if "prefect" in sys.modules:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "submit":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    with stopping.stoppable(_report_once) if args.command in ("run", "evaluate") else nullcontext():
        try:
            code = args.fn(args, rest) if args.command == "submit" else args.fn(args)
            _drain_run_logs()
        except BaseException as e:
            _drain_run_logs()
            if stopping.signum is not None:  # the interrupt, whatever Prefect or Ray made of it on its way up
                return _stopped()
            if isinstance(e, USER_ERRORS):
                print(f"cpipe: error: {e}", file=sys.stderr)
                return 2
            if isinstance(e, KeyboardInterrupt):
                return 130
            raise
        return _stopped() if stopping.signum is not None else code


if __name__ == "__main__":  # the run flows.cpipe starts
    end_with_parent()
    exit_now(main())
