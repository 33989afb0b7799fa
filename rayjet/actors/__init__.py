"""Thin Ray shells: stream replicas, the meta group, and the code that places and runs them.

Each actor class is a plain Python class; :func:`rayjet.actors.replica_actors.remote_class`
wraps it with ``ray.remote`` when it is spawned, so the logic underneath stays testable without
Ray.
"""
