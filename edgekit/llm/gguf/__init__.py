"""GGUF files (llama.cpp's format): the reader, tensor types, architectures, tokenizers and the import as a checkpoint."""
