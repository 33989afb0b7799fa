"""The NATS protocol gateway: any NATS client (nats.py, nats.go, the ``nats`` CLI) is a
rayjet client. See the README's "NATS clients" section."""

from rayjet.gateway.embedded import GatewayThread, serve
from rayjet.gateway.jetstream import JetStreamBridge
from rayjet.gateway.server import Gateway, GatewayOptions

__all__ = ["Gateway", "GatewayOptions", "GatewayThread", "JetStreamBridge", "serve"]
