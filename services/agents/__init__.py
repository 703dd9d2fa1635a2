"""LLM agents: definitions (agents/*.md, read by loader.py), the tool loop (loop.py), and the
tools they may call: toolbox.py is the registry (every tool by name, and `call`), toolkit.py
what a tool is made of, and the tools themselves live beside their domain (tools.py for the
workflow, code_tools, repo_tools, research_tools, analysis, implementation's `code_step`)."""
