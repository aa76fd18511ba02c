"""Serving: an HTTP API (FastAPI on uvicorn) for an exported model, with micro-batching,
back-pressure, Prometheus metrics and streamed text generation.

The modules named in ``STANDALONE`` import nothing from edgekit (only the standard library,
numpy, fastapi/starlette, uvicorn, relative imports between themselves, and the board package for
the model itself): a bundle copies them byte for byte next to its ``serve.py`` (beside its
``edgekit_board/``), so a board serves the model without edgekit or torch. The others (``loader``, ``ray_app``, ``loadtest``) build on edgekit.
"""

STANDALONE = ("__init__.py", "inputs.py", "batcher.py", "metrics.py", "auth.py", "app.py",
              "standalone.py", "http_limits.py", "startup_probe.py", "settings.py")
