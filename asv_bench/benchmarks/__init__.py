"""asv benchmarks for tapeflow, parameterised over devices (see ../asv.conf.json)."""
