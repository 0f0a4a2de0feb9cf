"""Data preparation: Spider rows to the three splits and the staged bundle, and the bundle's zip (host; standard library and bundle/ only)."""
