"""pytest plugin (filled below)."""
