"""Graph layouts tried before quantization: which fusions ONNX Runtime gets to make.

* ``runtime``: the graph as exported; ONNX Runtime fuses what it matches when the session loads.
* ``no-skip-ln``: as exported, but each residual ``Add`` that feeds a ``LayerNormalization`` becomes
  the equivalent ``Sum``, so the session does not fuse the pair into ``SkipLayerNormalization``.
  Measured with ORT 1.32, 1 thread, AVX-512 VNNI, a 6-layer BERT at sequence 128: that fused
  CPU kernel took 0.53 ms where Add + LayerNormalization took 0.09 ms, i.e. ~20% of an int8
  encoder's time. Shape inference before quantization lets the session fuse all 12 of them (the
  raw export only 6), which is why edgekit's dynamic int8 was ~8-12% slower than
  ``quantize_dynamic`` on the raw file.
* ``transformer``: ``onnxruntime.transformers.optimizer`` first (Attention, BiasGelu,
  EmbedLayerNormalization fusions; dynamic quantization then makes QAttention), with its
  SkipLayerNormalization fusions off and residual Adds kept out of the session's reach as above.

``--auto`` builds and times the layouts; the manifest records the one used (``fusion``).
"""

from __future__ import annotations

from pathlib import Path
from edgekit.core import onnx_files
from edgekit.core.errors import EdgekitError, unknown_name

FUSIONS = ("runtime", "no-skip-ln", "transformer")


def check_fusion(name: str) -> None:
    if name not in FUSIONS:
        raise unknown_name("fusion", name, FUSIONS)


def block_skip_layernorm(model) -> int:
    """Residual ``Add`` (two activations) -> ``Sum`` where its output feeds a LayerNormalization;
    in place. Returns how many were rewritten."""
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    normalized = {n.input[0] for n in model.graph.node if n.op_type == "LayerNormalization" and n.input}
    count = 0
    for node in model.graph.node:
        if (node.op_type == "Add" and len(node.input) == 2 and node.output[0] in normalized
                and not set(node.input) & constants):
            node.op_type = "Sum"
            count += 1
    return count


def transformer_optimize(src: Path, dst: Path) -> dict:
    """ORT's transformer fusions (SkipLayerNormalization off) from ``src`` to ``dst``; the counts of
    the fused operators. Raises EdgekitError when the optimizer fails on this graph."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    from edgekit.quantize.toolkits.ort_backend import quiet

    options = FusionOptions("bert")
    options.enable_skip_layer_norm = False
    options.enable_bias_skip_layer_norm = False
    heads, hidden = attention_shape(onnx_files.load(src, load_data=False))
    try:
        with quiet():
            model = optimizer.optimize_model(str(src), model_type="bert", num_heads=heads, hidden_size=hidden,
                                             optimization_options=options, opt_level=0)
            stats = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    except Exception as exc:  # the optimizer raises many types on graphs it does not expect
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EdgekitError(f"ONNX Runtime's transformer optimizer failed: {first}") from None
    # (the optimizer's own save sorts the graph and declares the com.microsoft opset its fused ops need)
    model.save_model_to_file(str(dst), use_external_data_format=onnx_files.needs_external_data(model.model))
    return stats


def attention_shape(model) -> tuple[int, int]:
    """(heads, hidden size) of a BERT-like export, or (0, 0) to let the optimizer guess.

    hidden: the LayerNormalization scale's length; head size: the constant last dimension of the
    (batch, sequence, -1, head size) reshapes that split heads (the optimizer's own guess misses
    this form of transformers' export, and then fuses no Attention)."""
    from onnx import numpy_helper

    sizes = {i.name: list(i.dims) for i in model.graph.initializer}
    hidden = next((sizes[n.input[1]][0] for n in model.graph.node if n.op_type == "LayerNormalization"
                   and len(n.input) > 1 and len(sizes.get(n.input[1], [])) == 1), 0)
    consts = {}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t).ravel().tolist()
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        concat = producer.get(node.input[1]) if node.op_type == "Reshape" and len(node.input) > 1 else None
        if concat is None or concat.op_type != "Concat" or len(concat.input) != 4:
            continue
        tail = [consts.get(name) for name in concat.input[2:]]
        if tail[0] == [-1] and tail[1] and len(tail[1]) == 1 and tail[1][0] > 0 and hidden and hidden % tail[1][0] == 0:
            return hidden // tail[1][0], hidden
    return 0, 0


def apply_fusion(src: Path, dst: Path, fusion: str, exported: Path | None = None) -> tuple[Path, dict]:
    """The graph to quantize for ``fusion`` (``src`` itself for ``runtime``) and what was done.

    ``exported``: the model as exported, before ORT's pre-processing; the transformer optimizer
    starts from it (its Attention and EmbedLayerNormalization patterns match the exporter's graph,
    not the pre-processed one: measured on all-MiniLM-L6-v2, 6 Attention fusions vs none)."""
    check_fusion(fusion)
    if fusion == "runtime":
        return src, {"fusion": "runtime"}
    details: dict = {"fusion": fusion}
    source = src
    if fusion == "transformer":
        fused = dst.with_name(dst.stem + "-fused.onnx")
        details["fused_ops"] = transformer_optimize(exported or src, fused)
        source = fused
    model = onnx_files.load(source)
    details["skip_layernorm_blocked"] = block_skip_layernorm(model)
    if fusion == "no-skip-ln" and not details["skip_layernorm_blocked"]:
        return src, details  # no Add -> LayerNormalization pair: the graph stays as it is
    onnx_files.save(model, dst, bool(onnx_files.data_files(src)) or None)
    return dst, details
