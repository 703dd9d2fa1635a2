"""What the agents can do: the tool loop (loop.py) and the tools they may call. toolbox.py is
the registry (every tool by name, and `call`), toolkit.py what a tool is made of; the tools
live by domain (tools.py for the workflow, code_tools, repo_tools, research_tools, analysis,
web_tools, implementation's `code_step`). The tools reach into every domain below.

May import: core, code, claude, workflow, dispatch, results, research, day, planning."""
