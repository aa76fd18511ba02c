"""Options shared by several commands, defined once (``Annotated`` aliases, as huggingface_hub's ``hf`` CLI does).

A command declares ``target: TargetOpt = None``; the flag names, the short form and the help text live
here, so ``-t`` means ``--target`` everywhere and the help cannot drift between commands. Bounds on
numbers (``min=``/``max=``) belong in the ``typer.Option`` here, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

TargetOpt = Annotated[
    Optional[str],
    typer.Option("--target", "-t", metavar="NAME|TOML",
                 help="Target profile name (see `edgekit targets`) or a .toml path."),
]
ModelOpt = Annotated[
    str, typer.Option("--model", "-m", metavar="NAME", help="Zoo model name (see `edgekit models`)."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (same seed, same weights on CPU).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout (no table).")]
LLMKernelsOpt = Annotated[Optional[str], typer.Option(
    "--kernels", help="Language models: how the .pte updates and reads its KV cache. portable (default): "
                      "ExecuTorch's standard operators, which edgekit-run has (bundles run on the board without "
                      "Python); llm: ExecuTorch's fused LLM kernels, faster, but only its Python package has them.")]

# Models from outside the zoo (package.module:factory, hf:CONFIG): how to build their example inputs.
InputShapeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--input-shape", metavar="[NAME=]DIMS",
                 help="Outside-zoo models: 1x3x224x224 or NAME=Nx128 (N: a dynamic axis; repeatable)."),
]
InputDtypeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--input-dtype", metavar="[NAME=]DTYPE",
                 help="Outside-zoo models: float32, int64, ... or NAME=DTYPE (repeatable)."),
]
DynamicAxesOpt = Annotated[
    Optional[list[str]],
    typer.Option("--dynamic-axes", metavar="[NAME=]AXES",
                 help="Outside-zoo models: 0, or NAME=0:batch,1:sequence (repeatable)."),
]
InputRangeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--input-range", metavar="NAME=LOW:HIGH",
                 help="Outside-zoo models: valid integer values, e.g. input_ids=0:30522 (repeatable)."),
]
StateDictOpt = Annotated[
    Optional[Path],
    typer.Option("--state-dict", metavar="FILE",
                 help="Outside-zoo models: weights (.safetensors, a shard index, or plain tensors loaded with "
                      "weights_only=True). An hf:FOLDER loads its own model.safetensors without it."),
]
RandomInitOpt = Annotated[
    bool,
    typer.Option("--random-init", help="hf: sources: build the config with random weights (seed 0) instead of "
                                       "trained ones, to try the pipeline only; said in a warning and the manifest."),
]

# Budget overrides (edgekit gate, edgekit pipeline).
MaxSizeOpt = Annotated[
    Optional[str], typer.Option("--max-size-mb", metavar="SIZE",
                                help="Model size budget, e.g. 4, 4MB, 512KiB (bare number: MB)."),
]
MaxP50Opt = Annotated[
    Optional[str], typer.Option("--max-p50-ms", metavar="TIME",
                                help="p50 latency budget, e.g. 15, 15ms, 0.015s (bare number: ms)."),
]
MaxP99Opt = Annotated[
    Optional[str], typer.Option("--max-p99-ms", metavar="TIME",
                                help="p99 latency budget, e.g. 20, 20ms, 0.02s (bare number: ms)."),
]
MaxRssOpt = Annotated[
    Optional[str], typer.Option("--max-peak-rss-mb", "--max-rss-mb", metavar="SIZE",
                                help="Peak RSS budget, e.g. 768, 768MB, 1GiB (bare number: MB)."),
]
MaxTtftOpt = Annotated[
    Optional[str], typer.Option("--max-ttft-ms", metavar="TIME",
                                help="Language models: time-to-first-token budget, e.g. 800, 0.8s (bare number: ms)."),
]
MinDecodeOpt = Annotated[
    Optional[str], typer.Option("--min-decode-tps", metavar="RATE",
                                help="Language models: decode rate floor, e.g. 20 or 20tok/s (bare number: tokens/s)."),
]
MaxDropOpt = Annotated[
    Optional[str], typer.Option("--max-accuracy-drop", metavar="DROP",
                                help="Accuracy drop budget: 1.0 or 1pt = percentage points; "
                                     "0.5% = relative to the float accuracy."),
]
MaxErrorRateOpt = Annotated[
    Optional[str], typer.Option("--max-error-rate", metavar="RATE",
                                help="Error-rate budget for `edgekit loadtest` results: share of requests "
                                     "that did not succeed, e.g. 0.1 or 0.1% (bare number: %)."),
]
ConfigOpt = Annotated[
    Optional[Path], typer.Option("--config", metavar="TOML",
                                 help="Project file with a budgets table (default: ./edgekit.toml, "
                                      "else ./pyproject.toml)."),
]


def source_options(input_shape, input_dtype, dynamic_axes, input_range, state_dict, random_init: bool = False) -> dict:
    """The outside-zoo options as the keyword arguments quantize() / export() take (unset ones dropped)."""
    options = {
        "input_shapes": input_shape or None, "input_dtypes": input_dtype or None,
        "dynamic_axes": dynamic_axes or None, "input_ranges": input_range or None, "state_dict": state_dict,
        "random_init": True if random_init else None,
    }
    return {key: value for key, value in options.items() if value is not None}
