"""A user's own topology code, as a user would write it in their project (not in the suite).

``word_functions`` holds the user functions, ``app`` builds and runs the topology; the
tests import them in-process and also copy them to a temporary directory and run ``app`` as
a child process with a clean environment (as ``dagster dev`` and the demo run user code).
"""
