"""The public client: ``rayjet.connect()`` and the JetStream handle."""

from rayjet.client.connection import NAMESPACE, JetStream, connect, default_data_dir

__all__ = ["NAMESPACE", "JetStream", "connect", "default_data_dir"]
