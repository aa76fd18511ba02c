"""Pretrained language-model families: one file each (llama, qwen, gemma), and the table that maps a GGUF architecture to one."""
