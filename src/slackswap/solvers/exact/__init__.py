"""The exact solvers (``milp``, ``cpsat``): the LP relaxation and its coarse version, the CP-SAT
model, plans guided by the relaxation, the search around them and interruptible engine calls."""
