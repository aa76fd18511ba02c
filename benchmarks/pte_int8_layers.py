"""Where `.pte` int8 gains on this host: XNNPACK int8 vs fp32 per layer type, at EfficientNet-Lite0's shapes.

`formats_pretrained.py` measures `.pte` static int8 at about 0.73x fp32 on EfficientNet-Lite0,
against about 0.46x for ONNX Runtime. This script splits that figure by layer type: each case is
a stack of four conv-BN(-ReLU6) blocks of one kind (so one int8 input/output conversion is
spread over four layers), exported with edgekit's own `.pte` path (`torch.export` -> XNNPACK
delegate), fp32 and PT2E static int8 (edgekit's `XNNPACKQuantizer` recipe, per-channel weights,
calibrated on random inputs: speed does not depend on the values). Both programs of a case are
timed alternately in this process, 1 XNNPACK thread, 5 rounds; printed: median p50 per format
and the int8/fp32 ratio.

    .venv/bin/python benchmarks/pte_int8_layers.py [--rounds 5] [--runs 40] [--per-tensor]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def blocks(kind: str):
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin, cout, k, groups=1, act=True, stride=1):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
            self.bn = nn.BatchNorm2d(cout)
            self.act = nn.ReLU6() if act else nn.Identity()
            for p in self.bn.parameters():
                nn.init.uniform_(p, 0.5, 1.5)

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    if kind == "stem":
        return nn.Sequential(Block(3, 32, 3, stride=2)), (1, 3, 224, 224)
    if kind == "dw3":
        return nn.Sequential(*[Block(144, 144, 3, groups=144) for _ in range(4)]), (1, 144, 56, 56)
    if kind == "dw5":
        return nn.Sequential(*[Block(240, 240, 5, groups=240) for _ in range(4)]), (1, 240, 28, 28)
    if kind == "pw56":  # expand / project pairs of the 56x56 stage
        return nn.Sequential(Block(24, 144, 1), Block(144, 24, 1, act=False),
                             Block(24, 144, 1), Block(144, 24, 1, act=False)), (1, 24, 56, 56)
    if kind == "pw7":
        return nn.Sequential(Block(192, 1152, 1), Block(1152, 192, 1, act=False),
                             Block(192, 1152, 1), Block(1152, 192, 1, act=False)), (1, 192, 7, 7)
    raise ValueError(kind)


CASES = {
    "stem": "stem conv 3x3 s2, 3->32 @224",
    "dw3": "depthwise 3x3, C=144 @56 (x4)",
    "dw5": "depthwise 5x5, C=240 @28 (x4)",
    "pw56": "pointwise 1x1, 24<->144 @56 (x4)",
    "pw7": "pointwise 1x1, 192<->1152 @7 (x4)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=40, help="timed calls per format per round")
    parser.add_argument("--per-tensor", action="store_true", help="per-tensor int8 weights (default: per channel)")
    args = parser.parse_args(argv)

    import torch

    from edgekit.core.input_spec import InputSpec
    from edgekit.formats import executorch as pte

    pte.native()._unsafe_reset_threadpool(1)  # before any program loads (see serve/pte_model.py)
    from edgekit.quantize.toolkits import pt2e_backend

    spec = [InputSpec(name="x", shape=(1, 1, 1, 1))]  # static shapes: one planned size

    def median_ms(method, x, runs: int) -> float:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            method.execute([x])
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    print(f"{'layers':38s} {'fp32 ms':>8s} {'int8 ms':>8s} {'int8/fp32':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, label in CASES.items():
            torch.manual_seed(0)
            model, shape = blocks(kind)
            model.eval()
            x = torch.randn(shape)
            paths = {"fp32": Path(tmp) / f"{kind}-fp32.pte", "int8": Path(tmp) / f"{kind}-int8.pte"}
            pte.lower(pte.export_program(model, (x,), spec), paths["fp32"], {})
            graph, _ = pt2e_backend.calibrated(model, (x,), spec, [(torch.randn(shape),) for _ in range(4)],
                                               pt2e_backend.quantizer(per_channel=not args.per_tensor))
            pte.lower(pte.export_program(graph, (x,), spec), paths["int8"], {})
            methods = {name: pte.load_method(path) for name, path in paths.items()}
            for method in methods.values():
                median_ms(method, x, 10)  # warm-up
            rounds: dict[str, list[float]] = {name: [] for name in methods}
            for _ in range(args.rounds):
                for name, method in methods.items():
                    rounds[name].append(median_ms(method, x, args.runs))
            fp32, int8 = (statistics.median(rounds[name]) for name in ("fp32", "int8"))
            print(f"{label:38s} {fp32:8.3f} {int8:8.3f} {int8 / fp32:8.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
