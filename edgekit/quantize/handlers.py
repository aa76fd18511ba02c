"""Built-in methods: each asks the requested formats' quantizers (``formats.Format.quantizer``) for int8 files."""

from __future__ import annotations

from edgekit.quantize.job import QuantJob
from edgekit.quantize.produced import Produced


def _per_format(method: str, job: QuantJob, config) -> list[Produced]:
    """Each requested format's quantizer (from the format table) runs ``method``, in order.

    Each gets the whole config: ``--exclude`` names are checked against every requested format.
    """
    from edgekit import formats

    produced = []
    for fmt in config.formats:
        produced.extend(getattr(formats.get(fmt).quantize_ops(), method)(job, config))
    return produced


def dynamic(job: QuantJob, config) -> list[Produced]:  # config: methods.DynamicConfig
    return _per_format("dynamic", job, config)


def static(job: QuantJob, config) -> list[Produced]:  # config: methods.StaticConfig
    return _per_format("static", job, config)


def qat(job: QuantJob, config) -> list[Produced]:  # config: methods.QatConfig
    return _per_format("qat", job, config)
