"""The host commands of `python3 -m harness`: each module turns its flags into calls of the packages beside it."""
