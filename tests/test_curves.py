"""Training curves: the TensorBoard event files read back by TensorBoard's own reader, and the PNG beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pipeline.train.curves import PNG, TENSORBOARD_DIR, write_curves


def rows() -> list[dict]:
    """Steps as train_step and train_loop record them; dev_spearman only where the dev set was scored."""
    out = []
    for step in range(1, 6):
        out.append(
            {
                "step": step,
                "loss": 3.0 - 0.25 * step,
                "contrastive_loss": 2.0 - 0.2 * step,
                "mlm_loss": 1.0 - 0.05 * step,
                "grad_norm": 0.5 * step,
                "lr": 1e-5 * step,
                "skipped": False,
                "grad_scale": 1.0,
                "tokens": 100 + step,
                "batch": 12345 + step,
                "data_seconds": 0.01 * step,
                "seconds": 1.5 * step,
                "dev_spearman": 0.6 + 0.01 * step if step % 2 == 0 else None,
            }
        )
    return out


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture
def written(tmp_path: Path) -> Path:
    write_curves(rows(), str(tmp_path))
    return tmp_path


def test_every_quantity_is_a_scalar_tag_with_its_steps_and_values(written):
    got = scalars(written / TENSORBOARD_DIR)
    steps = [1, 2, 3, 4, 5]
    expected = {
        "loss/total": [3.0 - 0.25 * s for s in steps],
        "loss/contrastive": [2.0 - 0.2 * s for s in steps],
        "loss/mlm": [1.0 - 0.05 * s for s in steps],
        "optim/grad_norm": [0.5 * s for s in steps],
        "optim/lr": [1e-5 * s for s in steps],
        "data/wait_seconds": [0.01 * s for s in steps],
    }
    assert set(got) == {*expected, "dev/spearman"}
    for tag, values in expected.items():
        assert [s for s, _ in got[tag]] == steps, tag
        assert [v for _, v in got[tag]] == pytest.approx(values, rel=1e-6), tag


def test_null_dev_scores_are_left_out_not_written_as_zero(written):
    dev = scalars(written / TENSORBOARD_DIR)["dev/spearman"]
    assert [s for s, _ in dev] == [2, 4]
    assert [v for _, v in dev] == pytest.approx([0.62, 0.64])


def test_an_objective_without_mlm_has_no_mlm_curve(tmp_path):
    write_curves([{k: v for k, v in r.items() if k != "mlm_loss"} for r in rows()], str(tmp_path))
    assert "loss/mlm" not in scalars(tmp_path / TENSORBOARD_DIR)


def test_writing_again_replaces_the_curves_instead_of_doubling_them(written):
    write_curves(rows(), str(written))
    assert len(scalars(written / TENSORBOARD_DIR)["loss/total"]) == 5


def test_the_png_is_a_valid_image(written):
    from PIL import Image

    path = written / PNG
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100


@pytest.mark.slow  # a fresh interpreter: this process may have imported TensorFlow already
def test_writing_the_curves_never_imports_tensorflow(tmp_path):
    """TensorFlow (the `use` extra) is installed here; TensorBoard would import it, seconds of start-up and its
    C++ log lines on the user's terminal, after every training."""
    import subprocess
    import sys

    code = (
        "import importlib.util, sys; from tests.test_curves import rows; "
        "from pipeline.train.curves import write_curves; "
        "assert importlib.util.find_spec('tensorflow'), 'the use extra is not installed'; "
        f"write_curves(rows(), {str(tmp_path)!r}); print('tensorflow' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False" and "TensorFlow" not in done.stderr, done.stderr[-2000:]
    assert scalars(tmp_path / TENSORBOARD_DIR)["loss/total"][0] == (1, 2.75)
