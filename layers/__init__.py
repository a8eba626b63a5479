"""gelulab's activations as each framework's own layer, named as einops names its layers:

    gelulab.layers.torch   GELU, ReLU, SiLU, Activation   torch.nn.Module
    gelulab.layers.keras   GELU, ReLU, SiLU, Activation   keras.layers.Layer, registered as serializable
    gelulab.layers.flax    GELU, ReLU, SiLU, Activation   flax.linen.Module

Importing this package imports no framework; each submodule imports its own framework only.
"""
