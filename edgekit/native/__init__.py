"""The native runtime: ``edgekit-run``, a C++17 program that runs ExecuTorch ``.pte`` programs (or,
built with its ONNX Runtime or ncnn backend, ONNX or ncnn models) with no Python on the board, and the code
that builds it.

    runner/       its source (compiled as one program; no third-party code)
    toolchain.py  the compiler for an architecture (host g++, or Debian's aarch64 cross compiler)
    wheel.py      ExecuTorch's headers and shared libraries for an architecture, from its wheel
    build.py      ``build_runner``: compile once per (sources, wheel, compiler, CPU flags), cached
    libraries.py  which of the wheel's libraries a program needs, and their licence notices
    ort_build.py  ``build_ort_runner``: the ONNX Runtime build (runner/ort_backend.cpp, no ExecuTorch)
    ort_wheel.py  ONNX Runtime's libonnxruntime.so for an architecture, from the onnxruntime wheel
    ort_headers.py ONNX Runtime's C API header, from Debian 13's libonnxruntime-dev (private apt)
    ncnn_build.py ``build_ncnn_runner``: the ncnn build (runner/ncnn_backend.cpp over ncnn's C API)
    ncnn_source.py ncnn's libncnn.so and C headers for an architecture, built from its source distribution

The board runtime that runs the binary is ``edgekit.board.runtimes.native_runtime``.
"""
