"""The launch plan: steps, merged launches, where values live, the lowered program and its text."""
