"""The genetic search (``ga``, ``ga-random``): the solver, its DEAP search, islands and repair."""
