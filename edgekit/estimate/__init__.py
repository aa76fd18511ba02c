"""Latency on a board estimated from instructions counted under emulation (``edgekit.emulate.icount``).

A cost model per core (``costmodel``): cycles per instruction class, the board's clock
(``targets/*.toml`` ``max_mhz``) and an Amdahl thread scaling, fitted to latencies published for
Raspberry Pi boards (``published.toml``, read by ``figures``) by ``benchmarks/latency_estimate.py``,
which writes the fitted parameters to ``cores.toml``. ``for_target`` applies them to a target.
"""
