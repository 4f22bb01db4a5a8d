"""Connecting to Ray, for the stages that run on it and the tasks that start it for them, and leaving it."""

from __future__ import annotations

import atexit
import logging
import os
import re
import secrets
import shutil
import sys
import tempfile

from pipeline.errors import InputError
from storage import DatasetError

log = logging.getLogger("cpipe")
# Loggers of Ray's whose tracebacks of some errors are no news to the user. Ray Train's controller logs a
# GetTimeoutError whenever its resource request to Ray Data's autoscaling coordinator takes over 5 s ("safe to
# ignore", Ray says), as on a loaded machine, in a run that succeeds; and the user's error its own step met (a full
# disk writing the run's state, storage's DatasetError), which the driver says in one line
# (pipeline.train.failures.worker_input_error).
QUIETED = (
    "ray.train.v2._internal.execution.scaling_policy.autoscaling_coordinator_client",
    "ray.train.v2._internal.execution.controller.controller",
)


class _TimeoutsAsDebug(logging.Filter):
    """A QUIETED logger's record of a GetTimeoutError, or of the user's InputError or DatasetError, is logged as if
    at debug level: Ray Train's own log file keeps it, the terminal and a job's log do not. Any other record, any
    other failure included, is left as it is. A filter, not the logger's level: Ray Train's controller resets its
    loggers' levels (logging.config.dictConfig of `ray.train`) after the workers' setup hook has run."""

    def filter(self, record: logging.LogRecord) -> bool:
        from ray.exceptions import GetTimeoutError

        if record.exc_info and isinstance(record.exc_info[1], (GetTimeoutError, InputError, DatasetError)):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


# Lines Ray's C++ core worker logs at error level in runs that are fine, which log_to_driver would put on the
# user's terminal: Ray Train's controller on every run, that its PreemptionWatcher actor (ray-project/ray#53727)
# has constructor arguments in the object store. Python's logging cannot reach them; the workers' log files
# keep them.
NOISE = re.compile(r"core_worker\.cc:\d+: Actor with class name: 'PreemptionWatcher'.*max_restarts > 0")


def _quiet_driver_logs() -> None:
    """Drop NOISE from the workers' output this driver prints (Ray's own printer, through its dispatcher)."""
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    def quieted(handler):
        def handle(batch):
            lines = [line for line in batch["lines"] if not NOISE.search(line)]
            if lines:
                handler({**batch, "lines": lines})

        return handle

    with dispatcher._lock:
        dispatcher.handlers = [
            (name, quieted(handler) if name == "ray_print_logs" else handler) for name, handler in dispatcher.handlers
        ]


def ray_init(address: str | None, num_cpus: int | None) -> None:
    import ray

    if not ray.is_initialized():
        # Workers' prints reach the driver once, through log_to_driver, not also through Train's print patch.
        os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
        # What a local instance's workers would print on the user's terminal that is Ray's business, not theirs:
        # Ray Data's per-dataset INFO lines (its log files keep warnings and errors) and the deprecation
        # warnings Ray's own internals raise. The workers inherit these; the user's own settings win.
        os.environ.setdefault("RAY_DATA_LOG_LEVEL", "WARNING")
        os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
        # The workers' lines this driver prints come with their prefix in color codes, which off a terminal (a log
        # file, Prefect's worker) are bytes of noise.
        if not (sys.stdout.isatty() and sys.stderr.isatty()):
            os.environ.setdefault("RAY_COLOR_PREFIX", "0")
        # RAY_ADDRESS (set inside Ray jobs) means a cluster too. Without either, "local" starts our own
        # instance: a bare ray.init() would join whatever `ray start` left on this machine.
        cluster = address or os.environ.get("RAY_ADDRESS")
        if cluster:
            ray.init(address=cluster, log_to_driver=True, configure_logging=False)
        else:
            # Seconds to a minute of silence otherwise, before the first stage that runs on it says anything.
            log.info("starting a local Ray instance (%s)...", f"{num_cpus} CPUs" if num_cpus else "every CPU")
            _start_local(num_cpus)
        _quiet_driver_logs()


# The environment variables Ray's processes read the authentication mode and token from.
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
# While a local instance we started lives: its token's directory, and AUTH_VARIABLES as they were before it.
_token: dict = {}


def _start_local(num_cpus: int | None) -> None:
    """Start our own instance, closed to the host's other users: its dashboard's Jobs API runs any command, as
    this user, for whoever reaches it. Ray's token authentication is on, with a token of this instance's own in a
    file only this user reads (a 0600 file in a 0700 directory), whose path Ray's processes inherit; every one of
    its ports listens on 127.0.0.1. The dashboard stays: Ray Train asks its state API, with the token, whether
    its actors live."""
    import ray
    import ray._private.ray_constants as constants

    _drop_token()  # one left by an instance shut down with ray.shutdown() rather than ray_shutdown()
    directory = tempfile.mkdtemp(prefix="cpipe-ray-")
    path = os.path.join(directory, "token")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secrets.token_hex(32))
    _token.update(directory=directory, saved={name: os.environ.get(name) for name in AUTH_VARIABLES})
    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=path)
    _reload_auth()
    # At exit too, as Ray's own handler shuts Ray down; whichever runs first, the token goes once Ray is down.
    atexit.register(ray_shutdown)
    # Ray Train's controller looks at its workers every 2 s by default, and a checkpoint's report and a finished
    # run wait for that look: 3 to 7 s of a small run's minute, for no gain on one machine.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    # Ray takes 127.0.0.1 as the node's address, and so has every server listen there, only where it holds
    # clusters unsupported (macOS, Windows); elsewhere it swaps in the host's reachable address and listens on
    # that or on all interfaces. The instance we start is one node; its processes are told the address.
    clusters, constants.ENABLE_RAY_CLUSTER = constants.ENABLE_RAY_CLUSTER, False
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            log_to_driver=True,
            configure_logging=False,
            runtime_env={"worker_process_setup_hook": setup_worker},
        )
    finally:
        constants.ENABLE_RAY_CLUSTER = clusters


def _reload_auth() -> None:
    """Have this process read the authentication mode and token again: Ray reads them once and keeps them."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _drop_token() -> None:
    """The local instance's token removed, and AUTH_VARIABLES as they were before it, once the instance is down."""
    if not _token:
        return
    for name, value in _token.pop("saved").items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # The mode first, then the file: Ray's client threads still draining would otherwise read the token again,
    # find no file, and abort the process (Ray's own tests reset it in this order).
    _reload_auth()
    shutil.rmtree(_token.pop("directory"), ignore_errors=True)


def setup_worker() -> None:
    """Runs in every worker process of a local instance we start, and of a job `cpipe submit` sends to a
    cluster (flows.submit names it there), before its tasks and actors."""
    import ray

    quiet_timeouts()
    # Ray Train's controller and state actors ask Ray's state API whether an actor lives, and without an
    # address that API looks for "the" Ray instance on the host: with a second one running (another user's, a
    # `ray start`), it fails ("Found multiple active Ray instances") or asks the other one. Ours is the answer.
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address


def quiet_timeouts() -> None:
    for name in QUIETED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _TimeoutsAsDebug) for f in logger.filters):
            logger.addFilter(_TimeoutsAsDebug())


def ray_shutdown() -> None:
    """Stop this process's Ray (the local instance it started, with every worker, whose token goes with it) if it
    connected to one."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    _drop_token()


def started_here() -> bool:
    """Whether this process's Ray is a local instance it started (whose CPUs are all it will have), not a
    cluster it connected to (which an autoscaler may grow). Ray says so only on its private node object."""
    import ray._private.worker

    node = ray._private.worker._global_node
    return node is not None and node.is_head()


def private_directory() -> str | None:
    """The local instance's own directory (its token's: this user's alone, 0700, removed when the instance stops)
    if this process started the Ray it is connected to; None otherwise."""
    return _token.get("directory") if started_here() else None
