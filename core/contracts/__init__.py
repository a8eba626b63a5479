"""The small contracts backends implement: the backend contract and capability record (core.contracts.contract),
the framework-agnostic Backend object built on it (interface), and the training and BERT encoder contracts
(training, encoder)."""
