"""Prefect flows and the `cpipe` command line."""
