"""Adapters over the quantization toolkits (ONNX Runtime, torch.ao, PT2E/torchao) and the graph
edits they need; the routes call them, nothing here knows a method or a config."""
