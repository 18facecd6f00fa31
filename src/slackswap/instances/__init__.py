"""Instance files (versioned JSON) and the catalog of bundled instances addressable by name."""
