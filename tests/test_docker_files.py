"""docker/: the images' recipes and the compose stack, checked as files (no Docker, no network).

Nothing here builds an image or starts a container; what can be known without them is checked:
the stack's shape, that it refers to Dockerfiles that exist, the order of the installs, the
CUDA image's Python, and that every CLI option the stack passes exists in the installed tools.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import re
import shlex
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, as in the CUDA image
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
COMPOSE_CUDA = DOCKER / "compose.cuda.yaml"
SERVICES = {"postgres", "prefect-server", "prefect-worker", "ray-head", "ray-worker"}
RAY_NODES = {"prefect-worker", "ray-head", "ray-worker"}  # every service that runs `ray start`
TORCH = "torch==2.13.0"


# ---------- helpers ----------


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # Docker drops comment lines, even inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, args = text.partition(" ")
        out.append((keyword.upper(), " ".join(args.split())))
    assert not pending, f"{dockerfile.name} ends inside a continued instruction"
    return out


def stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, FROM first."""
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(dockerfile):
        if ins[0] == "FROM":
            result.append([])
        assert result, f"{dockerfile.name}: {ins[0]} before the first FROM"
        result[-1].append(ins)
    return result


def runs(stage: list[tuple[str, str]]) -> list[str]:
    return [args for kw, args in stage if kw == "RUN"]


def position(stage: list[tuple[str, str]], pattern: str) -> tuple[int, int]:
    """(RUN index, offset in it) of the first RUN matching `pattern`; fails if none does."""
    for i, command in enumerate(runs(stage)):
        m = re.search(pattern, command)
        if m:
            return i, m.start()
    pytest.fail(f"no RUN matches {pattern!r}")


def env(stage: list[tuple[str, str]]) -> dict[str, str]:
    out = {}
    for kw, args in stage:
        if kw == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                out[key] = value
    return out


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} and ${VAR}, with every variable unset."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", value)


def command(service: dict) -> str:
    cmd = service.get("command", "")
    return " ".join(cmd) if isinstance(cmd, list) else cmd


def env_of(service: dict) -> dict[str, str]:
    e = service.get("environment", {})
    if isinstance(e, list):
        e = dict(item.partition("=")[::2] for item in e)
    return {k: interpolate(str(v)) for k, v in e.items()}


def targets(service: dict) -> set[str]:
    return {interpolate(str(v)).split(":")[1] for v in service.get("volumes", [])}


def published(service: dict) -> dict[int, str]:
    """container port -> host address, from "HOST_IP:HOST_PORT:CONTAINER_PORT" entries."""
    out = {}
    for p in service.get("ports", []):
        parts = str(p).split(":")
        out[int(parts[-1])] = parts[0] if len(parts) == 3 else "0.0.0.0"
    return out


def click_options(cmd) -> set[str]:
    return {o for p in cmd.params for o in p.opts}


def cyclopts_options(fn) -> set[str]:
    out = set()
    for p in inspect.signature(fn, eval_str=True).parameters.values():
        for meta in getattr(p.annotation, "__metadata__", ()):
            for attr in ("name", "alias"):
                v = getattr(meta, attr, None)
                if v:
                    out.update([v] if isinstance(v, str) else v)
    return out


def long_options(cmd: str) -> set[str]:
    return {tok.split("=")[0] for tok in shlex.split(cmd) if tok.startswith("--")}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# ---------- compose.yaml ----------


def test_compose_has_the_five_services(services):
    assert set(services) == SERVICES


def test_every_image_of_ours_is_built_from_a_dockerfile_that_exists(services):
    for path in (COMPOSE, COMPOSE_CUDA):
        for name, svc in load(path)["services"].items():
            if "build" in svc:
                build = svc["build"]
                context = (path.parent / build["context"]).resolve()
                dockerfile = context / build.get("dockerfile", "Dockerfile")
                assert context == ROOT, f"{name}: the build context must be the repository root"
                assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
                assert svc["image"].startswith("contrastive-pipeline:"), name
            elif path == COMPOSE:
                # Only third-party images may come without a build; ours are never pulled.
                assert not svc["image"].startswith("contrastive-pipeline"), name
    assert services["postgres"]["image"] == "postgres:16"
    for name in SERVICES - {"postgres"}:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile.cpu"


def test_postgres_has_a_volume_and_a_healthcheck(services):
    pg = services["postgres"]
    assert "/var/lib/postgresql/data" in targets(pg)
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])


def test_prefect_server_runs_on_postgres(services):
    server, pg = services["prefect-server"], services["postgres"]
    assert command(server) == "prefect server start --host 0.0.0.0"
    assert 4200 in published(server)
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    url = env_of(server)["PREFECT_API_DATABASE_CONNECTION_URL"]
    pg_env = env_of(pg)
    m = re.fullmatch(r"postgresql\+asyncpg://([^:]+):([^@]+)@([^:/]+):(\d+)/(.+)", url)
    assert m, url
    assert m.groups() == (
        pg_env["POSTGRES_USER"],
        pg_env["POSTGRES_PASSWORD"],
        "postgres",
        "5432",
        pg_env["POSTGRES_DB"],
    )
    assert "4200/api/health" in " ".join(server["healthcheck"]["test"])


def test_asyncpg_comes_with_prefect():
    """The postgresql+asyncpg URL needs asyncpg in the image; prefect must still bring it."""
    requires = importlib.metadata.requires("prefect") or []
    assert any(re.match(r"asyncpg\b", r) and "extra ==" not in r for r in requires), requires


def test_prefect_worker_polls_the_process_pool_and_drives_the_ray_cluster(services):
    worker = services["prefect-worker"]
    cmd = command(worker)
    # A Ray driver needs a raylet on its own host: the worker joins the cluster, then polls.
    join = cmd.index("ray start --address=ray-head:6379")
    poll = cmd.index("prefect worker start --pool local-process --type process")
    assert join < poll
    assert "--num-cpus=0" in cmd
    e = env_of(worker)
    assert e["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert e["RAY_ADDRESS"] == "ray-head:6379"
    assert {"prefect-server", "ray-head"} <= set(worker["depends_on"])


def test_ray_nodes(services):
    head, node = services["ray-head"], services["ray-worker"]
    assert command(head).startswith("ray start --head --port=6379 --dashboard-host=0.0.0.0")
    assert command(head).endswith("--block")
    assert {8265, 6379} <= set(published(head))
    assert "8265" in " ".join(head["healthcheck"]["test"])
    assert command(node).startswith("ray start --address=ray-head:6379")
    assert command(node).endswith("--block")
    assert node["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_unauthenticated_ports_are_published_on_loopback_only(services):
    for name, svc in services.items():
        for port, host in published(svc).items():
            assert host == "127.0.0.1", f"{name}: port {port} published on {host}"


def test_artifacts_and_data_are_shared_by_the_worker_and_every_ray_node(compose, services):
    assert "artifacts" in compose["volumes"]
    for name in RAY_NODES:
        volumes = [str(v) for v in services[name]["volumes"]]
        assert "artifacts:/artifacts" in volumes, name
        assert "/data" in targets(services[name]), name
        # The object store must fit in /dev/shm (Docker's default is 64 MB).
        assert services[name]["shm_size"], name
    assert "artifacts:/artifacts" not in [str(v) for v in services["prefect-server"].get("volumes", [])]


def test_every_service_depended_on_as_healthy_has_a_healthcheck(services):
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"


def test_the_cuda_override_moves_every_ray_node_together(services):
    override = load(COMPOSE_CUDA)["services"]
    ray_nodes = {n for n, s in services.items() if "ray start" in command(s)}
    assert ray_nodes == RAY_NODES
    # One Python per Ray cluster: every node on the CUDA image, or none.
    assert set(override) == ray_nodes
    for name in ray_nodes:
        assert override[name]["image"] == "contrastive-pipeline:cuda"
        assert override[name]["build"]["dockerfile"] == "docker/Dockerfile.cuda"


def test_the_worker_polls_the_pool_of_the_local_deployment(services):
    prefect_yaml = ROOT / "prefect.yaml"
    if not prefect_yaml.exists():
        pytest.skip("no prefect.yaml in this checkout")
    local = {d["name"]: d for d in load(prefect_yaml)["deployments"]}["local"]
    assert f"--pool {local['work_pool']['name']}" in command(services["prefect-worker"])


# ---------- the CLI options the stack passes exist ----------


def test_ray_start_options_exist(services):
    from ray.scripts.scripts import start

    known = click_options(start)
    for name in RAY_NODES:
        for part in command(services[name]).split("&&"):
            if "ray start" in part:
                assert long_options(part) <= known, (name, long_options(part) - known)


def test_prefect_options_exist(services):
    import prefect.cli.server as server
    import prefect.cli.worker as worker

    assert long_options(command(services["prefect-server"])) <= cyclopts_options(server.start)
    poll = command(services["prefect-worker"]).split("&&")[-1]
    assert long_options(poll) <= cyclopts_options(worker.start)


# ---------- Dockerfiles ----------


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_torch_is_installed_before_the_project(name):
    build = stages(DOCKER / name)[0]
    torch_at = position(build, r"pip install torch==2\.13\.0 --index-url https://download\.pytorch\.org/whl/")
    project_at = position(build, r"""pip install "\.\[(fairseq,)?s3\]"( |$)""")
    assert torch_at < project_at
    # No other install names torch loosely (a later unpinned one could swap the build).
    for run in runs(build):
        for step in run.split("&&"):
            if "pip install" in step:
                for req in shlex.split(step.split("pip install", 1)[1]):
                    if re.match(r"torch\b", req):
                        assert req == TORCH, req


@pytest.mark.parametrize("name, index", [("Dockerfile.cpu", "cpu"), ("Dockerfile.cuda", "cu126")])
def test_torch_comes_from_the_matching_index_and_is_checked(name, index):
    build = stages(DOCKER / name)[0]
    assert any(f"{TORCH} --index-url https://download.pytorch.org/whl/{index}" in c for c in runs(build))
    assert any(f"torch.__version__ == '2.13.0+{index}'" in c for c in runs(build))


def test_cpu_image_base_and_python():
    froms = [stage[0][1] for stage in stages(DOCKER / "Dockerfile.cpu")]
    for f in froms:
        image = f.split()[0]
        assert re.fullmatch(r"python:3\.11-slim(-[a-z]+)?", image), image  # a tag, no digest
    assert froms[0].endswith("AS build")


def test_cuda_image_is_python_310_with_the_fairseq_extra():
    build, final = stages(DOCKER / "Dockerfile.cuda")
    for stage in (build, final):
        image = stage[0][1].split()[0]
        assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-(base|runtime)-ubuntu22\.04", image), image
        assert re.search(r"apt-get install .*\bpython3\.10\b", " ".join(runs(stage)))
    position(build, r"python3\.10 -m venv /opt/venv")  # fails when no RUN matches
    # pip 24.0 (fairseq's omegaconf 2.0.x has metadata pip 24.1+ rejects), before the extra.
    assert position(build, r"pip install pip==24\.0\b") < position(build, r'pip install "\.\[fairseq,s3\]"')
    assert re.search(r"import [^;]*\bfairseq\b", " ".join(runs(build)))


def test_fairseq_extra_and_python_range_allow_the_cuda_image(pyproject):
    from packaging.specifiers import SpecifierSet

    assert "3.10" in SpecifierSet(pyproject["project"]["requires-python"])
    assert any(r.startswith("fairseq") for r in pyproject["project"]["optional-dependencies"]["fairseq"])


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_runtime_stage(name):
    build, final = stages(DOCKER / name)[0], stages(DOCKER / name)[-1]
    e = env(final)
    assert e["PATH"].startswith("/opt/venv/bin:")
    assert ("COPY", "--from=build /opt/venv /opt/venv") in final
    assert "-m venv /opt/venv" in " ".join(runs(build))
    assert e["PYTHONUNBUFFERED"] == "1"
    assert e["RAY_AUTH_MODE"] == "disabled"
    assert e["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert ("WORKDIR", "/app") in final
    users = [args for kw, args in final if kw == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    # /artifacts exists in the image, owned by that user, so the named volume starts writable.
    assert re.search(r"install -d -o app -g app /artifacts", " ".join(runs(final)))
    assert re.search(r"useradd .*--uid 1000 .*\bapp\b", " ".join(runs(final)))
    assert users[-1].split(":")[0] in {"1000", "app"}


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_images_call_the_cpipe_of_the_project_scripts(name, pyproject):
    scripts = pyproject["project"]["scripts"]
    assert "cpipe" in scripts
    module, _, func = scripts["cpipe"].partition(":")
    source = ROOT / (module.replace(".", "/") + ".py")
    assert func in {n.name for n in ast.parse(source.read_text()).body if isinstance(n, ast.FunctionDef)}
    final = stages(DOCKER / name)[-1]
    cmd = [args for kw, args in final if kw == "CMD"][-1]
    assert yaml.safe_load(cmd)[0] == "cpipe"  # exec form, a JSON list
    assert "cpipe --help" in " ".join(runs(stages(DOCKER / name)[0]))  # the build runs it once


# ---------- .dockerignore ----------


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: a path is left out when it, or a folder above it, matches a pattern
    (`*` and `?` within one path segment, `**` across any number of them)."""

    def regex(pattern: str) -> str:
        out = re.escape(pattern.strip("/"))
        out = out.replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        return out.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")

    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(re.fullmatch(regex(p), prefix) for p in patterns for prefix in prefixes)


def test_dockerignore_keeps_out_environments_and_outputs_but_not_the_project(pyproject):
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(p.startswith("!") for p in patterns)  # the simple matcher below has no negation
    for path in (
        ".venv",
        "artifacts",
        "downloads",
        ".git",
        ".pytest_cache",
        "pipeline/__pycache__",
        "contrastive_pipeline.egg-info",
    ):
        assert _ignored(path, patterns), path
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    needed = [
        "pyproject.toml",
        pyproject["project"]["readme"],
        "configs/default.yaml",
        *(f"{p}/__init__.py" for p in packages),
    ]
    for path in needed:
        assert (ROOT / path).exists(), path
        assert not _ignored(path, patterns), f"{path} would be left out of the build context"
    # prefect.yaml's deployments run from /app in the images
    assert not _ignored("prefect.yaml", patterns)
