"""Tests of minidl.perf: counting, profiling, tracing and scalability prediction."""
