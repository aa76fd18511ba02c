"""``--method qat``: fake-quant fine-tuning on the task's training data, then real int8.

The float model's BN layers are folded into its convolutions first (eval-mode fusion), so the
fake-quant graph is plain Conv/Linear with weight and activation fake-quant. After a few epochs
(BN folded, observers frozen for the last epoch so the final ranges are the ones trained with):


The epoch kept is the one with the best fake-quant accuracy on the ``val`` split, counting the
ranges observed before any update (epoch 0, i.e. PTQ with QAT's observers).

* TorchScript: ``convert_fx`` -> a real int8 model for the target's quantized engine
  (``routes/torchscript.qat``).
* ONNX (``routes/onnx.qat``): the same fake-quant graph is exported (fixed scale/zero-point fake-quant functions become
  QuantizeLinear/DequantizeLinear pairs), then each weight's QuantizeLinear is folded into an int8
  initializer. The result is a QDQ model with exactly the ranges and rounding the fine-tuning
  saw, which ONNX Runtime fuses into int8 kernels like its own QDQ output. Transferring ranges
  into ``quantize_static`` instead would mean mapping FX node names to ONNX tensor names and
  re-rounding weights, which loses the point of QAT.
* ExecuTorch (``routes/executorch.qat``): PT2E's ``prepare_qat_pt2e`` graph, trained by the same
  loop (``train_fake_quant``), then ``convert_pt2e`` and lowering to XNNPACK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from edgekit.quantize.progress import report
from edgekit.data.datasets import load_split


@dataclass(frozen=True)
class FakeQuantHooks:
    """How one fake-quant API trains: torch.ao FX modules or a PT2E graph (``routes/executorch``)."""

    train_mode: Callable  # (model) -> None
    eval_mode: Callable  # (model) -> None
    freeze_observers: Callable  # (model) -> None: the last epoch trains with the final ranges
    finish: Callable = lambda model: None  # after the best epoch is restored


def fine_tuned(job, config):
    """(the torch.ao fake-quant model, QAT facts) for ``config``: trained once per job, shared by
    the formats made from it (TorchScript and ONNX)."""
    import dataclasses

    key = ("torch.ao", *(getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "formats"))
    if key not in job.memo:
        from edgekit.quantize.toolkits import torch_backend

        engine = job.target.quantized_engine
        prepared = torch_backend.prepare_qat(job.float_model(), job.example_inputs(), engine, config.per_channel)

        def finish(model) -> None:
            torch_backend.freeze_observers(model)
            torch_backend.sync_weight_qparams(model)
            model.eval()

        hooks = FakeQuantHooks(train_mode=lambda m: m.train(), eval_mode=lambda m: m.eval(),
                               freeze_observers=torch_backend.freeze_observers, finish=finish)
        with torch_backend.quiet(), torch_backend.quantized_engine(engine):
            qat_info = train_fake_quant(job, config, prepared, hooks)
        # The network QAT trained, as it ran in training (fake-quant, ranges frozen): what the int8
        # files implement, so the yardstick they are held to (the original float model is another
        # network now; the accuracy drop is still reported against its accuracy).
        job.reference_model = torch_backend.export_ready_fake_quant(prepared)
        job.memo[key] = (prepared, qat_info)
    return job.memo[key]


def train_fake_quant(job, config, prepared, hooks: FakeQuantHooks) -> dict:
    """Fine-tune ``prepared`` in place on the task's training split; keep the best epoch on ``val``."""
    import copy

    import torch
    import torch.nn.functional as F


    data = load_split(job.source.task["dataset"], "train")  # never the held-out split
    x_all, y_all = torch.from_numpy(data.inputs), torch.from_numpy(data.labels)
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    val = load_split(job.source.task["dataset"], "val")  # picks the epoch; the test split stays for reporting
    x_val, y_val = torch.from_numpy(val.inputs), torch.from_numpy(val.labels)
    # Adam: per-weight step sizes cope with the very different gradient scales that outlier
    # channels create (SGD with momentum diverged on them).
    optimizer = torch.optim.Adam(prepared.parameters(), lr=config.lr)
    steps = config.epochs * -(-len(y_all) // config.batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps, 1))
    history = []

    def val_accuracy() -> float:
        hooks.eval_mode(prepared)
        with torch.no_grad():
            return float((prepared(x_val).argmax(1) == y_val).float().mean())

    with torch.inference_mode(False):
        with torch.no_grad():  # observe the ranges once before any update: "epoch 0" is plain PTQ
            hooks.eval_mode(prepared)
            for start in range(0, len(y_all), config.batch_size):
                prepared(x_all[start : start + config.batch_size])
        best = (val_accuracy(), 0, copy.deepcopy(prepared.state_dict()))
        report(job.progress, "qat", 0, config.epochs, f"PTQ val accuracy {best[0]:.4f}")
        for epoch in range(1, config.epochs + 1):
            if epoch == config.epochs and config.epochs > 1:
                hooks.freeze_observers(prepared)
            hooks.train_mode(prepared)
            order = torch.randperm(len(y_all), generator=generator)
            total = 0.0
            for start in range(0, len(order), config.batch_size):
                idx = order[start : start + config.batch_size]
                loss = F.cross_entropy(prepared(x_all[idx]), y_all[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                total += float(loss.detach()) * len(idx)
            accuracy = val_accuracy()
            history.append({"epoch": epoch, "train_loss": round(total / len(order), 5), "val_accuracy": round(accuracy, 5)})
            report(job.progress, "qat", epoch, config.epochs,
                   f"loss {total / len(order):.4f}, val accuracy {accuracy:.4f}")
            if accuracy >= best[0]:  # ties: the later epoch (trained longer with the final ranges)
                best = (accuracy, epoch, copy.deepcopy(prepared.state_dict()))
        prepared.load_state_dict(best[2])
        hooks.freeze_observers(prepared)
        hooks.finish(prepared)
    job.calibration_info = {"source": f"{job.source.task['dataset']}:train (QAT)", "samples": int(len(y_all)),
                            "method": "qat"}
    return {"epochs": config.epochs, "lr": config.lr, "optimizer": "Adam", "train_samples": int(len(y_all)),
            "history": history, "best_epoch": best[1]}
