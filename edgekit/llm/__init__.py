"""Pretrained language models on the board: the cached runtime every consumer uses
(``cached``), ``.pte`` programs with a static KV cache in float, int8 and int4 (``program``),
and their benchmark (``bench``)."""
