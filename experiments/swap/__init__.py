"""The swap experiment (`gelulab swap`): `model` (loading the pretrained MiniLM BERT and its tokenizer, encoding,
the metrics) and `command` (swap GELU in every FFN, measure the damage, optionally fine-tune), with the labelled
sentence pairs in data/sentence_pairs.tsv. Each backend's encoder is backends/<name>/bert.py."""
