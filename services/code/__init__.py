"""Code on this host: the research repository's worktrees and their locks, file I/O inside a
worktree that refuses links and escapes, the sandbox that runs code with no host folder or
network, the unprivileged accounts it runs as, the code section of the experiment page, and
the demo repository.

May import: core."""
