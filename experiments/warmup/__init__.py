"""The warmup command (`gelulab warmup`): builds torch's float32 kernel loops (impl="kernel") ahead, once per
machine and version (backends.torch.kernels.warmup)."""
