"""The harness around the scoring bundle: prepare, pack, emulate, verify, submit, report."""
