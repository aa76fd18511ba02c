"""The training loop on CPU: contract, reproducibility, precision, failures, progress, profiling."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from edgekit.formats.artifacts import load_manifest
from edgekit.core.errors import EdgekitError, UsageError
from edgekit.sources.checkpoint import load_checkpoint, load_model_from_artifact
from edgekit.train.checkpoint import load_train_state
from edgekit.train.config import TrainConfig
from edgekit.train.loop import train

SMALL = {"model": "digits-cnn", "model_config": {"width": 4}, "max_steps": 6, "batch_size": 32, "log_every": 2}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def run(tmp_path, name="run", progress=None, **overrides):
    return train(TrainConfig(**{**SMALL, **overrides}), tmp_path / name, progress)


def final_weights(folder):
    return load_train_state(folder / "last.pt")["model"]


@pytest.mark.slow
def test_default_config_trains_digits_to_97_percent(tmp_path):
    folder, manifest = train(TrainConfig(), tmp_path / "digits")
    assert manifest.metrics["accuracy"] >= 0.97
    assert manifest.metrics["train_seconds"] > 0  # speed lives in benchmarks/, not in unit tests
    _, loaded = load_manifest(folder)
    assert loaded.kind == "checkpoint" and loaded.model["name"] == "digits-cnn"
    model = load_model_from_artifact(folder, loaded)
    assert not model.training


def test_artifact_contract(tmp_path):
    folder, manifest = run(tmp_path)
    assert {p.name for p in folder.iterdir()} >= {"checkpoint.pt", "last.pt", "manifest.json", "metrics.jsonl"}
    state, meta = load_checkpoint(folder / "checkpoint.pt")
    assert meta["model"] == "digits-cnn" and meta["model_config"]["width"] == 4
    raw = torch.load(folder / "checkpoint.pt", weights_only=True)
    assert set(raw) == {"model", "meta"} and isinstance(raw["meta"], str)
    assert manifest.kind == "checkpoint" and manifest.model == {"name": "digits-cnn", "config": meta["model_config"]}
    assert manifest.inputs[0].shape == (None, 1, 8, 8) and manifest.outputs == ("logits",)
    assert manifest.task["type"] == "classification" and 0 <= manifest.metrics["accuracy"] <= 1
    assert manifest.metrics["steps"] == 6
    _, loaded = load_manifest(folder)
    assert loaded.metrics == manifest.metrics


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    a, b, c = (final_weights(run(tmp_path, n, seed=s)[0]) for n, s in (("a", 3), ("b", 3), ("c", 4)))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_grad_accumulation_matches_the_big_batch(tmp_path):
    # No dropout and no batch norm, so micro-batches add up to the big batch exactly (up to rounding).
    cfg = {"model": "transformer-classifier", "model_config": {"d_model": 16, "n_heads": 2, "n_layers": 1, "dropout": 0.0}}
    big_folder, big_manifest = run(tmp_path, "big", batch_size=32, grad_accum=1, max_steps=3, **cfg)
    acc_folder, acc_manifest = run(tmp_path, "acc", batch_size=8, grad_accum=4, max_steps=3, **cfg)
    assert acc_manifest.metrics["loss"] == pytest.approx(big_manifest.metrics["loss"], rel=1e-5)
    big, acc = final_weights(big_folder), final_weights(acc_folder)
    for key in big:
        if key.endswith("qkv.bias"):  # the key bias has a zero gradient in exact arithmetic: Adam
            continue  # turns rounding noise there into lr-sized steps (it never changes the output)
        assert torch.allclose(big[key], acc[key], atol=2e-5), key


def test_progress_records_and_metrics_file(tmp_path):
    records = []
    folder, _ = run(tmp_path, progress=records.append, eval_every=3, clip_grad_norm=1.0)
    events = [r["event"] for r in records]
    assert events[0] == "start" and events[-1] == "end"
    steps = [r for r in records if r["event"] == "step"]
    assert [r["step"] for r in steps] == [2, 4, 6]
    for r in steps:
        assert r["unit"] == "samples" and r["throughput"] > 0 and r["eta_s"] >= 0
        assert {"loss", "lr", "elapsed_s", "grad_norm", "total_steps"} <= set(r)
    assert steps[-1]["eta_s"] == 0
    evals = [r for r in records if r["event"] == "eval"]
    assert [r["step"] for r in evals] == [3, 6] and "val_accuracy" in evals[0]
    assert {"best", "last"} <= {r["kind"] for r in records if r["event"] == "checkpoint"}
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in lines] == events


def test_warnings_without_a_callback_use_the_warnings_module(tmp_path):
    from edgekit.train.reporting import RunLog, TrainingWarning

    log = RunLog(tmp_path, None, enabled=True)
    with pytest.warns(TrainingWarning, match="careful"):
        log.warn("careful", step=1)
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["message"] == "careful"


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_cpu(tmp_path, precision):
    records = []
    folder, manifest = run(tmp_path, progress=records.append, precision=precision)
    start = records[0]
    assert start["precision"] == precision
    steps = [r for r in records if r["event"] == "step"]
    if precision == "fp16":
        assert all(r["loss_scale"] > 0 for r in steps)  # the GradScaler is live and logged
        assert "scaler" in load_train_state(folder / "last.pt")["meta"]
    else:
        assert "loss_scale" not in steps[0]
    assert all(v.dtype == torch.float32 for v in final_weights(folder).values() if v.is_floating_point())


def test_recurrent_models_default_to_fp32(tmp_path):
    import edgekit.models  # noqa: F401
    from edgekit.train.precision import resolve_precision

    cuda = torch.device("cuda")
    assert resolve_precision("auto", torch.device("cpu"), recurrent=False) == "fp32"
    if torch.cuda.is_available():
        assert resolve_precision("auto", cuda, recurrent=True) == "fp32"
        assert resolve_precision("auto", cuda, recurrent=False) in ("bf16", "fp16")
    assert resolve_precision("fp16", torch.device("cpu"), recurrent=True) == "fp16"  # asked for: kept


class _Flaky(nn.Module):
    """A linear digits classifier whose training loss is NaN on chosen forward calls."""

    def __init__(self, bad=(), always: bool = False):
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.bad, self.always, self.calls = set(bad), always, 0

    def forward(self, x):
        out = self.fc(x.flatten(1))
        if self.training:
            self.calls += 1
            if self.always or self.calls in self.bad:
                out = out * float("nan")
        return out


def _register_flaky():
    from edgekit.core.input_spec import InputSpec
    from edgekit.models.registry import ModelSpec, register_model

    register_model(
        ModelSpec(
            name="test-flaky",
            factory=_Flaky,
            default_config={"bad": [], "always": False},
            input_spec=lambda cfg: (InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}),),
            outputs=("logits",),
            task={"type": "classification", "dataset": "digits", "metric": "accuracy"},
        )
    )


def test_non_finite_loss_is_skipped_with_a_warning(tmp_path):
    _register_flaky()
    records = []
    folder, _ = run(tmp_path, model="test-flaky", model_config={"bad": [2, 3]}, progress=records.append)
    warnings = [r for r in records if r["event"] == "warning"]
    assert [w["step"] for w in warnings] == [2, 3]
    assert "non-finite loss at step 2: step skipped (1/5 in a row)" in warnings[0]["message"]
    assert all(torch.isfinite(v).all() for v in final_weights(folder).values())


def test_non_finite_loss_stops_the_run_after_max_in_a_row(tmp_path):
    _register_flaky()
    with pytest.raises(EdgekitError, match="loss was non-finite for 3 steps in a row .* --clip-grad-norm"):
        run(tmp_path, model="test-flaky", model_config={"always": True}, max_nonfinite=3, progress=lambda r: None)


def test_out_of_memory_names_the_fixes(tmp_path, monkeypatch):
    from edgekit.train import tasks

    def oom(self, model, batch):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(tasks.ClassificationTask, "loss", oom)
    with pytest.raises(EdgekitError, match=r"out of memory at step 1 .*--batch-size 16 --grad-accum 2.*--grad-checkpoint"):
        run(tmp_path)


def test_grad_checkpoint_needs_a_model_with_blocks(tmp_path):
    with pytest.raises(UsageError, match="--grad-checkpoint suits transformer"):
        run(tmp_path, grad_checkpoint=True)


def test_grad_checkpoint_trains_the_same_weights(tmp_path):
    cfg = {"model": "transformer-classifier", "model_config": {"d_model": 16, "n_heads": 2, "n_layers": 2}, "max_steps": 3}
    plain = final_weights(run(tmp_path, "plain", **cfg)[0])
    ckpt = final_weights(run(tmp_path, "ckpt", grad_checkpoint=True, **cfg)[0])
    for key in plain:
        assert torch.allclose(plain[key], ckpt[key], atol=1e-5), key


def test_profile_writes_a_trace(tmp_path):
    folder, _ = run(tmp_path, profile=True)
    traces = list((folder / "profile").glob("trace_step*.json"))
    assert len(traces) == 1
    assert "traceEvents" in json.loads(traces[0].read_text())


def test_dataloader_workers(tmp_path):
    a = final_weights(run(tmp_path, "w0", workers=0, max_steps=3)[0])
    b = final_weights(run(tmp_path, "w1", workers=1, max_steps=3)[0])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_data_file_is_only_for_language_models(tmp_path):
    with pytest.raises(UsageError, match="--data takes a text file for language models"):
        run(tmp_path, data=str(tmp_path / "x.txt"))


def test_model_settings_must_fit_the_data(tmp_path):
    with pytest.raises(UsageError, match="vocab_size=7 does not match the data"):
        run(tmp_path, model="transformer-classifier", model_config={"vocab_size": 7})
    with pytest.raises(UsageError, match="samples are 64 tokens long but max_len is 32; pass --set max_len=64"):
        run(tmp_path, model="transformer-classifier", model_config={"max_len": 32})


@pytest.mark.parametrize(
    "model, config",
    [
        ("transformer-lm", {"attention": "local", "window": 8}),
        ("transformer-lm", {"attention": "linear"}),
        ("lstm-lm", {}),
        ("transformer-classifier", {"attention": "full", "max_len": 64}),
    ],
)
def test_each_text_family_trains(tmp_path, model, config):
    sizes = {"d_model": 32, "n_heads": 2, "n_layers": 1, "max_len": 32} if model.startswith("transformer") else {
        "embed_dim": 16, "hidden_size": 32, "n_heads": 2, "max_len": 32}
    records = []
    folder, manifest = run(
        tmp_path, model=model, model_config={**sizes, **config}, max_steps=4, batch_size=8, progress=records.append
    )
    metric = manifest.task["metric"]
    assert 0 <= manifest.metrics[metric] <= 1
    losses = [r["loss"] for r in records if r["event"] == "step"]
    assert all(l == l for l in losses)  # finite
    if manifest.task["type"] == "language-modeling":
        assert records[1]["unit"] == "tokens" and manifest.metrics["perplexity"] > 1
        assert manifest.task["dataset"] == "pydoc-text" and manifest.task["seq_len"] == 32
        assert json.loads((folder / "tokenizer.json").read_text())["kind"] == "char"
    model_obj = load_model_from_artifact(folder, manifest)
    assert model_obj(torch.randint(0, 10, (2, 7))).shape[0] == 2


def test_user_text_file_and_word_tokenizer(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"The fox number {i} jumps over dog {i % 7}." for i in range(60)))
    folder, manifest = run(
        tmp_path, model="transformer-lm", data=str(corpus), tokenizer="word", seq_len=16,
        model_config={"d_model": 16, "n_heads": 2, "n_layers": 1}, max_steps=2, batch_size=4,
    )
    assert manifest.task["dataset"] is None and manifest.task["data"] == str(corpus)
    assert manifest.model["config"]["vocab_size"] == len(json.loads((folder / "tokenizer.json").read_text())["vocab"])
    with pytest.raises(UsageError, match="exceeds the model's max_len"):
        run(tmp_path, "long", model="transformer-lm", model_config={}, data=str(corpus), seq_len=999)


def test_threads_apply_to_the_run_only(tmp_path):
    before = torch.get_num_threads()
    records = []
    run(tmp_path, threads=1, max_steps=1, progress=records.append)
    assert records[0]["threads"] == 1
    assert torch.get_num_threads() == before
