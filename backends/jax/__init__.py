"""The jax backend (see core.interface for the module contract)."""
