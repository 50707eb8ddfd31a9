"""The `optgraph` command: arguments, the commands, what they print and write."""
