"""`gelulab verify`: the float32 kernels checked over every float32 input (experiments.verify.command)."""
