"""Distributed training in textbook form: allreduce algorithms, gradient buckets, and more."""
