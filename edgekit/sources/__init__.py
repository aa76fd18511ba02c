"""Where models come from: ``model_source`` resolves what a user names (a checkpoint folder, an
``.onnx`` file, ``package.module:factory``, ``hf:FOLDER``) into a ``ModelSource``; ``checkpoint``
reads and writes edgekit's checkpoint format; ``hf_weights`` loads a Hugging Face folder's trained
weights; ``token_inputs`` infers a transformer graph's token inputs; ``gguf_file`` reads and
validates a GGUF file (llama.cpp's format) and ``gguf_import`` writes it as a checkpoint artifact
(``edgekit import gguf:PATH``)."""
