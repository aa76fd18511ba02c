"""Calibration: the statistics and the activation ranges static quantization needs (the data itself
is read by ``edgekit.userdata``).

``histogram``   a fixed-size streaming histogram (memory does not grow with the samples)
``calibrators`` the methods (minmax, percentile, entropy, mse): prepare, collect(batch), compute()
``onnx_ranges`` one pass of the data through an ONNX model, every activation into a calibrator
``cache``       computed ranges kept as JSON, keyed by model, data, method and settings

Nothing is imported here: each module is imported by name (numpy and onnxruntime load on use).
"""
