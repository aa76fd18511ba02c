"""Device bundles: one exported model and everything a board needs to run, check and time it.

``edgekit bundle EXPORT_DIR --target rpi4 --out dist/rpi4`` writes the folder ``dist/rpi4/`` and
the archive ``dist/rpi4.tar.gz`` beside it (which unpacks to ``rpi4/``). Both are written under
a temporary name and renamed into place, so an interrupted run leaves neither half-written.

Layout of a bundle folder (schema ``edgekit.bundle``, version 1)::

    model.onnx | model.pt  the model, one format per bundle (bundle.json "model" names it)
    manifest.json          the export's manifest, listing only this model file (kind "export")
    reference.npz          fixed inputs + the float model's outputs at batch 1 and 7
                           (keys "b{batch}/input/{name}" and "b{batch}/output")
    edgekit_board/         byte-identical copy of the board package edgekit/board/ (the runtimes,
                           the benchmark runner, the output check)
    runner.py              entry script: the benchmark (edgekit_board/runner.py)
    check_outputs.py       entry script: runs the model on reference.npz's inputs, prints JSON
                           {max_abs, cosine, top1_agreement per batch, outputs sha256}
    requirements.txt       numpy + onnxruntime (or torch) pinned to the host's versions,
                           with "# platform: <tag>" and "# python: <version>" comments
    bundle.json            {"schema": "edgekit.bundle", "schema_version": 1, target, arch,
                           python_platform, python_version, model, model_sha256, format,
                           precision, variant, runtime {name, version}, quantized_engine,
                           requirements, wheels, host_check, override, source,
                           edgekit_version, created}
    README.txt             how to install (online, or offline from wheels/) and run
    wheels/                optional (--wheels): the target platform's binary wheels
    SHA256SUMS             ``sha256sum -c`` format, over every other file (wheels included)

The board package and its entry scripts use only the standard library, numpy and the model's
runtime. ``edgekit.bundle.verify.verify_checksums(folder)`` checks SHA256SUMS.
"""

from __future__ import annotations
