"""Per-row results of several stages compared: accuracy, paired tests, changed rows, chart (host)."""
