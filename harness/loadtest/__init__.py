"""The grader service's load test, run from the host over loopback."""
