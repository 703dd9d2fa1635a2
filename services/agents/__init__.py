"""LLM agents: definitions (agents/*.md), the tool loop, and the tools they may call."""
