"""The stage task's Prefect retries (tasks.build): a network failure a later try may get past is retried with
backoff; the failures a retry cannot mend fail at once. Real failures from pipeline.corpus.download against a
real HTTP server on 127.0.0.1."""

from __future__ import annotations

import pytest

from pipeline.corpus.download import DownloadError, fetch
from tasks.build import _transient, fetch_eval_data, stage_task
from tests.conftest import free_port
from tests.test_download import server  # noqa: F401  (the fixture)


def failure(url: str, tmp_path) -> DownloadError:
    with pytest.raises(DownloadError) as caught:
        fetch(url, tmp_path, retries=1, backoff=0.01, timeout=0.5, progress=False)
    return caught.value


@pytest.mark.parametrize("status", [503, 429])
def test_a_busy_server_is_retried(server, tmp_path, status):  # noqa: F811
    server.statuses = [status, status]
    assert _transient(failure(server.url, tmp_path))


def test_a_stalled_download_is_retried(server, tmp_path):  # noqa: F811
    server.stalls = 2
    assert _transient(failure(server.url, tmp_path))


def test_a_missing_file_a_refused_connection_and_bad_input_are_not_retried(server, tmp_path):  # noqa: F811
    assert not _transient(failure(server.url.rsplit("/", 2)[0] + "/missing", tmp_path))
    assert not _transient(failure(f"http://127.0.0.1:{free_port()}/file.bin", tmp_path))  # offline, in effect
    assert not _transient(failure(str(tmp_path / "no-such-file"), tmp_path))
    assert not _transient(ValueError("a bug"))


def test_network_tasks_declare_retries_with_backoff():
    for task in (stage_task, fetch_eval_data):
        delays = task.retry_delay_seconds
        assert task.retries >= 2 and delays == sorted(delays) and delays[0] < delays[-1], (task, delays)
        assert task.retry_condition_fn is not None and task.retry_jitter_factor
