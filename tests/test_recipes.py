"""Each objective's preset is its paper's whole recipe (the numbers below are copied from the papers' code,
never read from the project), an explicit setting wins over it, and the recipe text names it; AdamW without
bias correction against a loop over the HF update; SGD as CERT builds it; the cosine and AllenNLP-lazy
schedules against their formulas."""

import math
from pathlib import Path

import pytest
import torch

from pipeline.config import Config, load_config
from pipeline.errors import ConfigError
from pipeline.train import stage as train_stage
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CONFIGS = Path(__file__).resolve().parent.parent / "configs"

# objective: (lr, batch, max length, weight decay, optimizer, eps, bias correction, SGD momentum, schedule, head width)
PAPERS = {
    # DeCLUTR's training_config/declutr_small.jsonnet: huggingface_adamw lr 5e-5, eps 1e-06, correct_bias false,
    # weight_decay 0.1, slanted_triangular, max_length 512.
    "declutr": (5e-5, 16, 512, 0.1, "adamw", 1e-6, False, 0.0, "slanted-triangular", None),
    # SimCSE's run_unsup_example.sh (--learning_rate 3e-5 --per_device_train_batch_size 64 --max_seq_length 32)
    # and the HF Trainer's defaults it keeps (AdamW eps 1e-8, weight_decay 0.0, linear decay, no warmup).
    "simcse": (3e-5, 64, 32, 0.0, "adamw", 1e-8, True, 0.0, "linear", None),
    # CERT's MOCO.py: SGD lr 0.00004, momentum 0.9, weight decay 1e-5, --cos, batch 32, max_length 64,
    # moco-dim 128.
    "cert": (4e-5, 32, 64, 1e-5, "sgd", 1e-8, True, 0.9, "cosine", 128),
}
FIELDS = (
    "lr",
    "batch_size",
    "max_length",
    "weight_decay",
    "optimizer",
    "adam_eps",
    "correct_bias",
    "sgd_momentum",
    "schedule",
    "projection_dim",
)


@pytest.mark.parametrize("objective", PAPERS)
def test_each_objective_trains_with_its_papers_whole_recipe(objective):
    cfg = TrainConfig(objective=objective)
    assert tuple(getattr(cfg, f) for f in FIELDS) == PAPERS[objective]
    lr, batch, length, decay = PAPERS[objective][:4]
    for part in (f"batch {batch}", f"lr {lr:g} {cfg.schedule}", f"weight decay {decay:g}", f"max length {length}"):
        assert part in cfg.recipe(), part
    optimizer = {
        "declutr": "AdamW eps 1e-06 no bias correction",
        "simcse": "AdamW eps 1e-08",
        "cert": "SGD momentum 0.9",
    }[objective]
    assert optimizer + "," in cfg.recipe()


def test_explicit_settings_win_over_the_preset_in_the_train_section_and_in_a_run():
    cfg = Config(
        train={"lr": 1e-3, "max_length": 130},
        runs={"simcse": {"objective": "simcse"}, "cert": {"objective": "cert", "batch_size": 8, "optimizer": "adamw"}},
    )
    simcse, cert = cfg.run_configs()["simcse"], cfg.run_configs()["cert"]
    assert (simcse.lr, simcse.max_length, simcse.batch_size, simcse.weight_decay) == (1e-3, 130, 64, 0.0)
    assert (cert.lr, cert.batch_size, cert.optimizer, cert.schedule, cert.weight_decay) == (
        1e-3,
        8,
        "adamw",
        "cosine",
        1e-5,
    )
    assert "AdamW eps 1e-08" in cert.recipe()  # an AdamW chosen over CERT's SGD is torch's


def test_the_cpu_demo_keeps_its_own_learning_rate_and_bias_corrects_declutrs_optimizer():
    # configs/default.yaml sets lr and max_length for the small encoder from scratch, and bias correction, which
    # that lr needs (BENCHMARKS.md); DeCLUTR's eps and the rest of its recipe stay.
    runs = load_config(CONFIGS / "default.yaml").run_configs()
    for run in runs.values():
        assert (run.lr, run.max_length, run.batch_size, run.adam_eps, run.correct_bias) == (1e-3, 130, 16, 1e-6, True)
    assert "no bias correction" not in runs["declutr"].recipe()


def test_recipe_settings_are_validated():
    for bad in (
        ["train.optimizer=adam"],
        ["train.adam_eps=0"],
        ["train.sgd_momentum=1"],
        ["train.projection=none", "train.projection_dim=64"],
        ["train.loss=moco"],
        ["train.momentum=0.9", "train.loss=info-nce", "train.memory_bank=8"],
        ["train.momentum=0.9", "train.loss=moco"],
        ["train.schedule=cyclic"],
    ):
        with pytest.raises(ConfigError):
            load_config(None, bad)


def hf_adamw_loop(p, grads, lr, eps, wd, b1=0.9, b2=0.999):
    """transformers' AdamW with correct_bias=False, element by element: m, v moments, p -= lr m / (sqrt(v) + eps),
    then the decoupled decay p -= lr wd p on the updated weight."""
    p, m, v = list(p), [0.0] * len(p), [0.0] * len(p)
    for g in grads:
        for i in range(len(p)):
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] ** 2
            p[i] -= lr * m[i] / (math.sqrt(v[i]) + eps)
            p[i] -= lr * wd * p[i]
    return p


def test_adamw_without_bias_correction_is_the_hf_update():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    weight, bias = model.weight.detach().flatten().tolist(), model.bias.detach().tolist()
    grads = [(torch.randn(2, 3, dtype=torch.float64), torch.randn(2, dtype=torch.float64)) for _ in range(4)]
    cfg = TrainConfig(objective="declutr", lr=0.01, weight_decay=0.1).model_copy(update={"schedule": "linear"})
    optimizer, _ = make_optimizer(model, cfg, 1000)  # the schedule is not stepped: lr stays 0.01
    for gw, gb in grads:
        model.weight.grad, model.bias.grad = gw.clone(), gb.clone()
        optimizer.step()
    expected_w = hf_adamw_loop(weight, [g.flatten().tolist() for g, _ in grads], 0.01, 1e-6, 0.1)
    expected_b = hf_adamw_loop(bias, [g.tolist() for _, g in grads], 0.01, 1e-6, 0.0)  # biases undecayed
    assert model.weight.detach().flatten().tolist() == pytest.approx(expected_w, rel=1e-12, abs=1e-15)
    assert model.bias.detach().tolist() == pytest.approx(expected_b, rel=1e-12, abs=1e-15)
    # The first step is (1 - b1) / sqrt(1 - b2) = 3.16 times lr, where torch's corrected AdamW moves lr.
    first = hf_adamw_loop([0.0], [[1.0]], 0.01, 0.0, 0.0)[0]
    assert first == pytest.approx(-0.01 * 0.1 / math.sqrt(0.001))


def test_cert_trains_with_sgd_momentum_decaying_every_weight():
    model = torch.nn.Linear(3, 2)
    optimizer, _ = make_optimizer(model, TrainConfig(objective="cert"), 10)
    assert isinstance(optimizer, torch.optim.SGD) and len(optimizer.param_groups) == 1
    group = optimizer.param_groups[0]
    assert (group["momentum"], group["weight_decay"], group["lr"]) == (0.9, 1e-5, pytest.approx(4e-5))


@pytest.mark.parametrize("schedule", ["cosine", "allennlp-lazy"])
def test_cosine_and_allennlp_lazy_schedules_follow_their_formulas(schedule):
    total, peak = 20, 1e-3
    cfg = TrainConfig(objective="cert", lr=peak, schedule=schedule)
    optimizer, scheduler = make_optimizer(torch.nn.Linear(2, 2), cfg, total)
    seen = []
    for _ in range(total):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    if schedule == "cosine":  # MoCo v2 / CERT: lr * 0.5 * (1 + cos(pi * t / T))
        expected = [peak * 0.5 * (1 + math.cos(math.pi * t / total)) for t in range(total)]
    else:  # AllenNLP 1.1 without a step count: the peak for batch 0, then peak / 32
        expected = [peak] + [peak / 32] * (total - 1)
    assert seen == pytest.approx(expected, rel=1e-9)


def test_new_settings_at_their_old_values_leave_the_train_fingerprint_as_it_was():
    """A run the new settings do not change (CLEAR's AdamW: eps 1e-8, bias-corrected, one worker) has a stage
    config without them, so its fingerprint, and the datasets trained before them, stay; DeCLUTR's new AdamW
    settings are in its own."""
    cfg = Config(runs={"clear": {"objective": "clear"}, "declutr": {}})
    new = {"optimizer", "adam_eps", "correct_bias", "sgd_momentum", "projection_dim", "scale_fix"}
    assert not new & set(train_stage.config(cfg, "clear")["train"])
    declutr = train_stage.config(cfg, "declutr")["train"]
    assert (declutr["adam_eps"], declutr["correct_bias"]) == (1e-6, False) and "optimizer" not in declutr
