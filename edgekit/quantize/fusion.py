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

FUSIONS = ("runtime", "no-skip-ln", "transformer")


def check_fusion(name: str) -> None:
    from edgekit.errors import unknown_name

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

    from edgekit import onnx_files
    from edgekit.errors import EdgekitError
    from edgekit.quantize.ort_backend import quiet

    options = FusionOptions("bert")
    options.enable_skip_layer_norm = False
    options.enable_bias_skip_layer_norm = False
    try:
        with quiet():
            model = optimizer.optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0,
                                             optimization_options=options, opt_level=0)
            stats = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    except Exception as exc:  # the optimizer raises many types on graphs it does not expect
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EdgekitError(f"ONNX Runtime's transformer optimizer failed: {first}") from None
    onnx_files.save(model.model, dst)
    return stats


def apply_fusion(src: Path, dst: Path, fusion: str) -> tuple[Path, dict]:
    """The graph to quantize for ``fusion`` (``src`` itself for ``runtime``) and what was done."""
    from edgekit import onnx_files

    check_fusion(fusion)
    if fusion == "runtime":
        return src, {"fusion": "runtime"}
    details: dict = {"fusion": fusion}
    source = src
    if fusion == "transformer":
        fused = dst.with_name(dst.stem + "-fused.onnx")
        details["fused_ops"] = transformer_optimize(src, fused)
        source = fused
    model = onnx_files.load(source)
    details["skip_layernorm_blocked"] = block_skip_layernorm(model)
    if fusion == "no-skip-ln" and not details["skip_layernorm_blocked"]:
        return src, details  # no Add -> LayerNormalization pair: the graph stays as it is
    onnx_files.save(model, dst, bool(onnx_files.data_files(src)) or None)
    return dst, details
