"""Shared helpers of the test suite: paths, in-process realrun jobs, golden predictions."""
