"""The public client: ``rayjet.connect()`` and the JetStream handle."""

from rayjet.client.connection import JetStream, connect, default_data_dir

__all__ = ["JetStream", "connect", "default_data_dir"]
