"""What runs on the board: one class per runtime, and the scripts that run models with them.

STANDALONE. Bundles carry this package, byte for byte, as ``edgekit_board/`` beside their entry
scripts (``runner.py``, ``check_outputs.py``), and ``edgekit verify --emulate`` carries it into the
emulated board for its probe. So nothing here imports edgekit: modules refer to each other
relatively, import only the standard library at module level, and load numpy and a runtime
only when a model is opened.

    runtimes/    one class per runtime (ONNX Runtime, TorchScript, ExecuTorch, the native runner)
                 behind one interface: load, input specs, bind/run, threads, facts (``open_model``)
    runner.py    the benchmark (timed calls, the --serve protocol)
    check.py     a bundle's output check against its reference outputs
    probe.py     a model on reference inputs, outputs to a file (emulated and host runs compare them)
    facts.py     memory and host facts; stats.py timing statistics; inputs.py input specs and arrays
"""

BUNDLED_NAME = "edgekit_board"  # the package's name inside a bundle
