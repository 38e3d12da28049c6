"""Speed, memory, exactness and cost benchmarks of attnkit (``python -m benchmarks.<name>``)."""
