"""The load path (`OpBuilder`), cache, locks, manifest, errors and the loaded `OpModule`."""
