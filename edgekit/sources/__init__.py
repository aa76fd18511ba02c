"""Where models come from, beside edgekit's own training: pretrained files turned into edgekit
artifacts. ``gguf_file`` reads and validates a GGUF file (llama.cpp's format), ``gguf_import``
writes it as a checkpoint artifact (``edgekit import gguf:PATH``)."""
