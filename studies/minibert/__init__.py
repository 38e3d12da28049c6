"""MiniBERT: tiny BERTs with projection-free attention, at the paper's protocol."""
