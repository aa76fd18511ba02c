"""Serving: an HTTP API (FastAPI on uvicorn) for an exported model, with micro-batching,
back-pressure, Prometheus metrics and streamed text generation.

The modules named in ``STANDALONE`` import nothing from edgekit (only the standard library,
numpy, fastapi/starlette, uvicorn and onnxruntime, relative imports between themselves): a
bundle copies them byte for byte next to its ``serve.py``, so a board serves the model without
edgekit or torch. The others (``loader``, ``ray_app``, ``loadtest``) build on edgekit.
"""

STANDALONE = ("__init__.py", "inputs.py", "batcher.py", "metrics.py", "auth.py", "app.py", "onnx_model.py",
              "standalone.py")
