"""The reader of ONNX files as onnxruntime runs them (backends/onnx/audit.py, api.audit's reader "onnx"): the
activation sites of an `.onnx` file, found in the graph onnxruntime optimizes and probed with onnxruntime's own
kernels. This is not an activation backend: it has no Capabilities record, is not in the registry
(gelulab.backends.BACKEND_NAMES) and computes no activation of gelulab's; gelulab.backends.READER_FOLDERS names
it. onnx and onnxruntime (the `export` extra) are imported inside its functions only."""
