"""SSAF's Table 2 and its diagnostics: sparse attention fine-tuned against softmax."""
