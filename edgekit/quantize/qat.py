"""``--method qat``: fake-quant fine-tuning on the task's training data, then real int8.

The float model's BN layers are folded into its convolutions first (eval-mode fusion), so the
fake-quant graph is plain Conv/Linear with weight and activation fake-quant. After a few epochs
(BN folded, observers frozen for the last epoch so the final ranges are the ones trained with):


The epoch kept is the one with the best fake-quant accuracy on the ``val`` split, counting the
ranges observed before any update (epoch 0, i.e. PTQ with QAT's observers).

* TorchScript: ``convert_fx`` -> a real int8 model for the target's quantized engine.
* ONNX: the same fake-quant graph is exported (fixed scale/zero-point fake-quant functions become
  QuantizeLinear/DequantizeLinear pairs), then each weight's QuantizeLinear is folded into an int8
  initializer. The result is a QDQ model with exactly the ranges and rounding the fine-tuning
  saw, which ONNX Runtime fuses into int8 kernels like its own QDQ output. Transferring ranges
  into ``quantize_static`` instead would mean mapping FX node names to ONNX tensor names and
  re-rounding weights, which loses the point of QAT.
"""

from __future__ import annotations

from edgekit.quantize.handlers import ONNX_FILE, TORCHSCRIPT_FILE
from edgekit.quantize.methods import Produced, QatConfig
from edgekit.quantize.progress import report


def quantization_aware_training(job, config: QatConfig) -> list[Produced]:
    import copy

    import torch
    import torch.nn.functional as F

    from edgekit.data.datasets import load_split
    from edgekit.quantize import torch_backend

    engine = job.target.quantized_engine
    data = load_split(job.source.task["dataset"], "train")  # never the held-out split
    x_all, y_all = torch.from_numpy(data.inputs), torch.from_numpy(data.labels)
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)

    prepared = torch_backend.prepare_qat(job.float_model(), job.example_inputs(), engine, config.per_channel)
    val = load_split(job.source.task["dataset"], "val")  # picks the epoch; the test split stays for reporting
    x_val, y_val = torch.from_numpy(val.inputs), torch.from_numpy(val.labels)
    # Adam: per-weight step sizes cope with the very different gradient scales that outlier
    # channels create (SGD with momentum diverged on them).
    optimizer = torch.optim.Adam(prepared.parameters(), lr=config.lr)
    steps = config.epochs * -(-len(y_all) // config.batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps, 1))
    history = []

    def val_accuracy() -> float:
        prepared.eval()
        with torch.no_grad():
            return float((prepared(x_val).argmax(1) == y_val).float().mean())

    with torch_backend.quiet(), torch_backend.quantized_engine(engine), torch.inference_mode(False):
        with torch.no_grad():  # observe the ranges once before any update: "epoch 0" is plain PTQ
            prepared.eval()
            for start in range(0, len(y_all), config.batch_size):
                prepared(x_all[start : start + config.batch_size])
        best = (val_accuracy(), 0, copy.deepcopy(prepared.state_dict()))
        report(job.progress, "qat", 0, config.epochs, f"PTQ val accuracy {best[0]:.4f}")
        for epoch in range(1, config.epochs + 1):
            if epoch == config.epochs and config.epochs > 1:
                torch_backend.freeze_observers(prepared)
            prepared.train()
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
        torch_backend.freeze_observers(prepared)
        torch_backend.sync_weight_qparams(prepared)
        prepared.eval()

    # The network QAT trained, as it ran in training (fake-quant, ranges frozen): what the int8
    # files implement, so the yardstick they are held to (the original float model is another
    # network now; the accuracy drop is still reported against its accuracy).
    job.reference_model = torch_backend.export_ready_fake_quant(prepared)
    qat_info = {"epochs": config.epochs, "lr": config.lr, "optimizer": "Adam", "train_samples": int(len(y_all)),
                "history": history, "best_epoch": best[1]}
    job.calibration_info = {"source": f"{job.source.task['dataset']}:train (QAT)", "samples": int(len(y_all)),
                            "method": "qat"}
    produced = []
    if "torchscript" in config.formats:
        qmodel = torch_backend.convert_qat(copy.deepcopy(prepared), engine)
        job.save_torchscript(qmodel, TORCHSCRIPT_FILE, engine)
        produced.append(Produced(TORCHSCRIPT_FILE, "torchscript", {
            "quantized_engine": engine, "backend": "torch.ao FX QAT", "qat": qat_info,
            **torch_backend.describe_qconfig(engine)}))
    if "onnx" in config.formats:
        from edgekit.export.onnx_export import export_onnx
        from edgekit.quantize.onnx_qdq import fold_weight_quantizers

        fake = torch_backend.export_ready_fake_quant(prepared)
        raw = job.scratch / "qat-fakequant.onnx"
        with torch_backend.quiet():
            # The TorchScript exporter: it turns fake-quant modules into QuantizeLinear/DequantizeLinear pairs
            export_onnx(fake, job.example_inputs(), job.source.inputs, job.source.outputs, raw,
                        max(job.target.onnx_opset, 13), route="torchscript")
        folded = fold_weight_quantizers(raw, job.dest / ONNX_FILE)
        produced.append(Produced(ONNX_FILE, "onnx", {
            "format": "QDQ", "backend": "torch.ao FX QAT -> torch.onnx (fake-quant export)",
            "weights_folded": folded, "qat": qat_info}))
    return produced
