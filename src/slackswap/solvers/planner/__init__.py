"""SlackSwap's planner: Algorithm 1's passes, the memory profile and link checks, the solver."""
