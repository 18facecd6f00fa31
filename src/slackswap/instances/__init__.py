"""Instance files (versioned JSON), the catalog of bundled instances by name, Eq. 1 across it."""
