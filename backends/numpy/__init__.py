"""The numpy backend (see core.interface for the module contract)."""
