"""Reaching a rayjet gateway (or any NATS server) without Ray: a blocking NATS client
(:mod:`rayjet.remote.connection`) and the JetStream API over it
(:mod:`rayjet.remote.jetstream`), for the CLI and for users connecting with credentials."""
