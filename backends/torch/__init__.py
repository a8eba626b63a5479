"""The torch backend (see core.interface for the module contract)."""
