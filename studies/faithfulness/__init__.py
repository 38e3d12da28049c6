"""Faithfulness and plausibility of each attention map's explanations."""
