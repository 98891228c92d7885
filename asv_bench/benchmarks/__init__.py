"""asv benchmarks for ozaki_backend, one module per area (see ../README.md)."""
