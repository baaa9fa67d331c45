"""rg: Ray-native knowledge-graph RAG (ReG, PrivGemo, ReMindRAG) — see README.md and DESIGN."""

__version__ = "0.1.0"
