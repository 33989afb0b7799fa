"""Streams of accounts other than the global one, in one cluster-wide catalogue.

A stream ``ORDERS`` of account ``A`` is ``A~ORDERS`` inside the cluster (its replicas'
actors, its directory, the catalogue); the account's clients see ``ORDERS``. Streams of the
global account ``$G`` keep their plain names, so a cluster without accounts has no
qualified names at all. Subjects are per account: streams of two accounts may capture the
same subjects; only streams of the same account are checked for overlap.
"""

from __future__ import annotations

GLOBAL = "$G"
SEP = "~"  # in no account's name; refused in the names clients of accounts give


def qualify(account: str | None, name: str) -> str:
    """The cluster's name of ``account``'s stream ``name``."""
    if account is None or account == GLOBAL:
        return name
    return f"{account}{SEP}{name}"


def account_of(name: str) -> str:
    """The account a stream of the cluster belongs to."""
    account, sep, _ = name.partition(SEP)
    return account if sep else GLOBAL


def display(name: str) -> str:
    """The name its account's clients know a stream by."""
    _, sep, rest = name.partition(SEP)
    return rest if sep else name


def belongs(name: str, account: str | None) -> bool:
    return account is None or account_of(name) == (account or GLOBAL)
