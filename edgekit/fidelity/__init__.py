"""Fidelity of a quantized model to its float model: every output, a metric per output that can
fail (``metrics``), run on batches or on streams with the state fed back (``compare``), and what
the figures were measured on (``evidence``). ``assess`` judges one file of a quantize job."""
