"""Accounts, users and permissions (pure logic: no Ray, no sockets).

- :mod:`rayjet.auth.conf`: nats-server's configuration syntax;
- :mod:`rayjet.auth.accounts`: accounts, users and who a CONNECT makes a client;
- :mod:`rayjet.auth.permissions`: publish/subscribe allow and deny lists;
- :mod:`rayjet.auth.nkeys`: nkey public keys, seeds and signatures.
"""

from rayjet.auth.accounts import (
    GLOBAL,
    SYSTEM,
    Account,
    Export,
    Identity,
    Import,
    JetStreamLimits,
    ServerAuth,
    User,
)
from rayjet.auth.conf import ConfigSyntaxError, parse, parse_file
from rayjet.auth.permissions import Permissions, Rules

__all__ = [
    "GLOBAL",
    "SYSTEM",
    "Account",
    "ConfigSyntaxError",
    "Export",
    "Identity",
    "Import",
    "JetStreamLimits",
    "Permissions",
    "Rules",
    "ServerAuth",
    "User",
    "parse",
    "parse_file",
]
