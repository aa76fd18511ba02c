#!/usr/bin/env python3
"""Serve this bundle's ONNX model over HTTP, with no edgekit and no torch on the board.

    python3 -m pip install -r requirements-serve.txt
    python3 serve.py                                    # http://127.0.0.1:8000
    python3 serve.py --host 0.0.0.0 --api-key KEY       # reachable from the network (key required)

POST /v1/predict (JSON, .npy or .npz), GET /v1/model, /healthz, /readyz, /metrics. Options:
python3 serve.py --help. (edgekit copies this file into bundles as serve.py, byte for byte.)
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from edgekit_serve.standalone import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(folder=HERE))
