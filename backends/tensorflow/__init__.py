"""The tensorflow backend (see core.interface for the module contract)."""
