"""One module per format: its int8 files for each built-in method, each function registered with
``@route(ConfigType, format)`` (``edgekit.quantize.registry`` imports every module here)."""
