"""An ``.onnx`` source as an fp32 export artifact: the pipeline's fp32 row for a model that is an ONNX file.

The file is shipped as ONNX Runtime runs it, less what older files carry that a caller never
feeds: initializers also listed as graph inputs (IR 3, as the ONNX model zoo's older files have
them) leave the inputs, and initializers no node reads are dropped; the opset and every node stay
as they are. The copy is checked against the original file on the reference inputs
(``reference.npz``, which it carries like every export) and stamped with its provenance.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.formats.artifacts import Manifest, describe_file, finalize
from edgekit._version import __version__
from edgekit.core import onnx_files
from edgekit.core.outputs import commit_dir
from edgekit.formats import onnx_export
from edgekit.formats.onnx import FORMAT


def export_onnx_file(src, out: str | Path, target, force: bool = False) -> tuple[Path, Manifest]:
    """Write ``out``: ``model.onnx`` (the ONNX source ``src``, a ``ModelSource``), its reference and
    manifest. Raises ParityError when the copy does not compute what the original does."""
    from edgekit.formats.evaluation import onnx_predictor
    from edgekit.formats.parity import check_parity, every_output
    from edgekit.formats.reference import REFERENCE_FILE, read_reference, write_predicted_reference

    original = Path(src.onnx_path)
    with commit_dir(out, "export", inputs=[original, target.source], force=force) as work:
        write_predicted_reference(work / REFERENCE_FILE, every_output(onnx_predictor(original)), src.inputs,
                                  src.task, src.reference_feed)
        cases = read_reference(work / REFERENCE_FILE, every_output=True)
        model = onnx_files.load(original)
        dropped = onnx_files.drop_initializer_inputs(model)
        unused = set(onnx_files.unused_initializers(model))
        if unused:
            kept = [init for init in model.graph.initializer if init.name not in unused]
            del model.graph.initializer[:]
            model.graph.initializer.extend(kept)
        details = {"variant": f"fp32-{FORMAT.name}", "source": "onnx file", "opset": _opset(model)}
        if dropped:
            details["initializer_inputs_dropped"] = len(dropped)
        if unused:
            details["unused_initializers_dropped"] = len(unused)
        onnx_export.stamp_metadata(model, {"edgekit_version": __version__, "model": src.model_info.get("name", ""),
                                           "target": target.name, "recipe": "fp32", **details})
        path = work / FORMAT.files.file_name
        written = onnx_files.save(model, path)
        if written:
            details["external_data"] = written
        onnx_export.check_model(path)
        parity = check_parity(every_output(onnx_predictor(path)), cases, "fp32",
                              f"fp32 {FORMAT.name} copy of {original.name}")
        metrics = {"accuracy": None, "float_accuracy": None, "parity": parity, "metric": "cosine",
                   "fidelity": {"cosine": parity.get("cosine"), "top1_agreement": parity.get("top1_agreement")}}
        entry = describe_file(work, path.name, FORMAT.name, precision="fp32", metrics=metrics, details=details)
        result = Manifest(kind="export", model=src.model_info, inputs=src.inputs, outputs=src.outputs, files=(entry,),
                          task=src.task, parent=src.parent, target=target.name)
        result = finalize(result, work)
    return Path(out), result


def _opset(model) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
