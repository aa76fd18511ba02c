"""Which tests are slow: marked ``slow`` at collection (conftest.py), so ``pytest -m "not slow"``
is the inner loop (see docs/development.md). CI runs them all.

A test file belongs here when its not-slow tests took over ~10 s of CPU (user + system, fixtures
included: a trained model, a native runner, a language model's program). Measured 2026-12-04 on the
project's 2-core machine shared with other jobs (load average 12-17): each file alone, one process,
``-m "not slow"``, cut at 45 s of wall time; "N+ CPU-s, cut at 45 s" means it was still running then.
A test marked ``@pytest.mark.slow`` in its own file needs no entry; a new slow test should carry
that mark rather than an entry here.
"""

from __future__ import annotations

# test file -> why (CPU seconds of the file's not-slow tests, fixtures included)
SLOW_FILES: dict[str, str] = {
    "tests/bench/test_bench_api.py": "10+ CPU-s, cut at 45 s",
    "tests/bench/test_bench_executorch.py": "9+ CPU-s, cut at 45 s",
    "tests/bench/test_bench_runner.py": "8+ CPU-s, cut at 45 s",
    "tests/bench/test_html_report.py": "9+ CPU-s, cut at 45 s",
    "tests/board/test_board_layer.py": "10+ CPU-s, cut at 45 s",
    "tests/bundle/test_bundle.py": "10+ CPU-s, cut at 45 s",
    "tests/bundle/test_native_bundle.py": "12+ CPU-s, cut at 45 s",
    "tests/bundle/test_offline_wheels.py": "9+ CPU-s, cut at 45 s",
    "tests/cli/test_cli_bench.py": "12+ CPU-s, cut at 45 s",
    "tests/cli/test_cli_defaults.py": "10+ CPU-s, cut at 45 s",
    "tests/cli/test_cli_info_cache.py": "8+ CPU-s, cut at 45 s",
    "tests/cli/test_cli_stages.py": "12+ CPU-s, cut at 45 s",
    "tests/cli/test_cli_train.py": "11+ CPU-s, cut at 45 s",
    "tests/emulate/test_emulate.py": "9+ CPU-s, cut at 45 s",
    "tests/emulate/test_emulate_errors.py": "10+ CPU-s, cut at 45 s",
    "tests/fidelity/test_quantize_evidence.py": "9+ CPU-s, cut at 45 s",
    "tests/formats/test_executorch_format.py": "8+ CPU-s, cut at 45 s",
    "tests/formats/test_external_data.py": "11+ CPU-s, cut at 45 s",
    "tests/formats/test_ncnn_format.py": "10+ CPU-s, cut at 45 s",
    "tests/formats/test_onnx_exporters.py": "12+ CPU-s, cut at 45 s",
    "tests/formats/test_onnx_zoo_files.py": "10+ CPU-s, cut at 45 s",
    "tests/gates/test_gates_device_latency.py": "8+ CPU-s, cut at 45 s",
    "tests/hostile/test_gguf_inputs.py": "10+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_messages.py": "2+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_numbers.py": "10+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_outputs.py": "10+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_remote.py": "10+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_serve.py": "9+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_sources.py": "7+ CPU-s, cut at 45 s",
    "tests/hostile/test_round2_verify.py": "8+ CPU-s, cut at 45 s",
    "tests/hostile/test_round3_api.py": "10+ CPU-s, cut at 45 s",
    "tests/hostile/test_round3_files.py": "8+ CPU-s, cut at 45 s",
    "tests/hostile/test_round3_llm.py": "10+ CPU-s, cut at 45 s",
    "tests/hostile/test_round3_native.py": "8+ CPU-s, cut at 45 s",
    "tests/llm/test_gguf_archs.py": "9+ CPU-s, cut at 45 s",
    "tests/llm/test_gguf_quants.py": "8+ CPU-s, cut at 45 s",
    "tests/llm/test_llm_programs.py": "8+ CPU-s, cut at 45 s",
    "tests/llm/test_spm_tokenizer.py": "12+ CPU-s, cut at 45 s",
    "tests/models/test_default_model.py": "10+ CPU-s, cut at 45 s",
    "tests/models/test_generate_threads.py": "6+ CPU-s, cut at 45 s",
    "tests/models/test_generation_chat.py": "9+ CPU-s, cut at 45 s",
    "tests/models/test_llama_gguf.py": "9+ CPU-s, cut at 45 s",
    "tests/models/test_lm_int8.py": "10+ CPU-s, cut at 45 s",
    "tests/models/test_models_text.py": "9+ CPU-s, cut at 45 s",
    "tests/native/test_native_onnx.py": "9+ CPU-s, cut at 45 s",
    "tests/native/test_native_ncnn.py": "11 CPU-s with its aarch64 runner cached (building it: ~40 CPU-s more)",
    "tests/native/test_native_runner.py": "4+ CPU-s, cut at 45 s",
    "tests/quantize/test_calibration_sources.py": "10+ CPU-s, cut at 45 s",
    "tests/quantize/test_calibration_streaming.py": "9+ CPU-s, cut at 45 s",
    "tests/quantize/test_hf_folders.py": "10+ CPU-s, cut at 45 s",
    "tests/quantize/test_parity_gate.py": "12+ CPU-s, cut at 45 s",
    "tests/quantize/test_pt2e_clamp.py": "cut at 45 s",
    "tests/quantize/test_quantize_accuracy_aware.py": "9+ CPU-s, cut at 45 s",
    "tests/quantize/test_quantize_cli.py": "11+ CPU-s, cut at 45 s",
    "tests/quantize/test_quantize_export.py": "10+ CPU-s, cut at 45 s",
    "tests/quantize/test_quantize_recipes.py": "cut at 45 s",
    "tests/quantize/test_quantize_sources.py": "9+ CPU-s, cut at 45 s",
    "tests/quantize/test_torch_fx_clamps.py": "10+ CPU-s, cut at 45 s",
    "tests/remote/test_hostile_remote.py": "8+ CPU-s, cut at 45 s",
    "tests/remote/test_remote_bench.py": "11+ CPU-s, cut at 45 s",
    "tests/remote/test_remote_hosts.py": "10+ CPU-s, cut at 45 s",
    "tests/remote/test_remote_native.py": "cut at 45 s",
    "tests/robust/test_robust_formats.py": "9+ CPU-s, cut at 45 s",
    "tests/robust/test_robust_quantize.py": "10+ CPU-s, cut at 45 s",
    "tests/serve/test_llm_chat.py": "2+ CPU-s, cut at 45 s",
    "tests/serve/test_serve.py": "10+ CPU-s, cut at 45 s",
    "tests/test_api.py": "10+ CPU-s, cut at 45 s",
    "tests/test_determinism.py": "11+ CPU-s, cut at 45 s",
    "tests/test_fuzz_parsers.py": "9+ CPU-s, cut at 45 s",
    "tests/test_hostile_checkpoints.py": "9+ CPU-s, cut at 45 s",
    "tests/test_hostile_inputs.py": "11+ CPU-s, cut at 45 s",
    "tests/test_hostile_limits.py": "10+ CPU-s, cut at 45 s",
    "tests/test_output_safety.py": "10+ CPU-s, cut at 45 s",
    "tests/test_pipeline_any_model.py": "10+ CPU-s, cut at 45 s",
    "tests/test_pipeline_configs.py": "10+ CPU-s, cut at 45 s",
    "tests/test_properties.py": "11+ CPU-s, cut at 45 s",
    "tests/train/test_train_accelerators.py": "9+ CPU-s, cut at 45 s",
    "tests/train/test_train_limits.py": "10+ CPU-s, cut at 45 s",
    "tests/train/test_train_loop.py": "11+ CPU-s, cut at 45 s",
    "tests/train/test_train_resume.py": "10+ CPU-s, cut at 45 s",
}

# single tests (node id prefixes) in otherwise fast files -> why
SLOW_TESTS: dict[str, str] = {
}


def is_slow(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0] in SLOW_FILES or any(nodeid.startswith(prefix) for prefix in SLOW_TESTS)
