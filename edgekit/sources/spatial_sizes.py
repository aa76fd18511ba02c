"""Whether edgekit may make up the sizes of a model's free axes.

Without data, edgekit feeds a model inputs of its own making: a dynamic batch axis gets a few rows
and a sequence axis a few tokens, but any other free axis (an image's height and width) gets 1. A
detector with up-sampling and skip connections cannot run at 1x1; ONNX Runtime then fails deep
inside a ``Resize`` or ``Concat``. Such a model is run once here at the made-up sizes, and when it
fails the user is asked for the sizes in one line, before any work. An image input whose height and
width are both free is asked for its size even when it runs at 1x1: no figure measured on 1x1 images
says anything (PP-OCRv4's detector runs at 1x1 in float, its int8 file does not).
"""

from __future__ import annotations

from edgekit.core.errors import UsageError
from edgekit import formats
from edgekit.board.runtimes import open_model
from edgekit.core import onnx_files
from edgekit.formats.onnx_export import native_output_silenced

KNOWN_AXES = ("batch", "sequence")  # the free axes edgekit sizes itself (formats/reference.py)


def free_axes(spec) -> dict[int, str]:
    """The axes of ``spec`` edgekit would fill with 1 (neither the batch axis nor a sequence)."""
    return {axis: name for axis, name in spec.dynamic_axes.items() if axis != 0 and name not in KNOWN_AXES}


def check_made_up_sizes(src, data_helps: bool = True) -> None:
    """UsageError when ``src`` (an ONNX file whose inputs have free axes besides the batch) cannot
    run at the sizes edgekit would feed it (made up, or given with ``--input-shape``); names the
    input, its free axes and the ``--input-shape`` to give."""
    if getattr(src, "onnx_path", None) is None:
        return
    declared = _declared_free_axes(src.onnx_path)
    if not any(declared.get(spec.name) for spec in src.inputs):
        return
    for spec in src.inputs:
        free = declared.get(spec.name) or {}
        made_up = {axis: name for axis, name in free.items() if axis < len(spec.shape) and spec.shape[axis] is None}
        if len(spec.shape) == 4 and len(made_up) >= 2 and spec.dtype.startswith("float"):
            wanted = "x".join(f"<{made_up[axis]}>" if axis in made_up else str(dim or 1) for axis, dim in enumerate(spec.shape))
            raise UsageError(
                f"{src.label} has free {'/'.join(made_up.values())} axes on input {spec.name!r}, which edgekit would "
                f"judge at 1x1 images; give the size it is used at: --input-shape {spec.name}={wanted}"
                + (" (or --calib with real inputs)" if data_helps else ""))
    from edgekit.formats.reference import random_inputs, sequence_length

    feed = random_inputs(src.inputs, 1, sequence_length(1))
    failure = _run_once(src.onnx_path, feed)
    if failure is None:
        return
    spec = next(s for s in src.inputs if declared.get(s.name))
    names = declared[spec.name]
    wanted = "x".join(f"<{names[axis]}>" if axis in names else str(dim or 1) for axis, dim in enumerate(spec.shape))
    fed = "x".join(str(d) for d in feed[spec.name].shape)
    how = "edgekit would make up" if free_axes(spec) else "--input-shape gives"
    raise UsageError(
        f"{src.label} has free {'/'.join(names.values())} axes on input {spec.name!r} and fails at the size {how} "
        f"({fed}: {failure}); give a size it runs at: --input-shape {spec.name}={wanted}"
        + (" (or --calib with real inputs)" if data_helps else "")
    )


def _declared_free_axes(path) -> dict[str, dict[int, str]]:
    """Input name -> {axis: name} of the axes after the first that the ONNX file leaves free."""
    model = onnx_files.load(path, load_data=False)
    out = {}
    for vi in onnx_files.model_inputs(model):
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = {axis: dim.dim_param or f"dim{axis}" for axis, dim in enumerate(dims)
                        if axis > 0 and not (dim.HasField("dim_value") and dim.dim_value > 0)
                        and (dim.dim_param or f"dim{axis}") not in KNOWN_AXES}
    return out


def _run_once(path, feed) -> str | None:
    """None when the model runs on ``feed``, else the first line of ONNX Runtime's complaint. The
    model is loaded by the board's ONNX runtime (``edgekit.board.runtimes``); what ONNX Runtime logs
    natively is silenced: the failure is reported in one line by the caller."""
    try:
        with native_output_silenced():
            runtime = open_model(formats.by_suffix(".onnx").name, path, 1)
            with runtime.context():
                runtime.run([feed[name] for name in runtime.call_order(feed, None)])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types (Fail, InvalidArgument)
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return first.split("Status Message: ")[-1][:200]
    return None
