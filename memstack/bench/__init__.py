"""The token-cost benchmark: replay real transcripts through strategies, price every call."""
