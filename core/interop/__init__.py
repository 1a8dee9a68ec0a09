"""Results in and out: importers of other tools' outputs, exports (CSV/Parquet/HTML/PNG),
the selection an export is made of, and the import/export CLI."""
