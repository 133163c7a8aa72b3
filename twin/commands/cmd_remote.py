"""Shared flags of the verbs that talk to a running server (``--server HOST:PORT`` ...)."""

from __future__ import annotations

import argparse
from pathlib import Path

from twin.core.errors import SpecError
from twin.core.extras import needs_extra


def add_client_args(p: argparse.ArgumentParser) -> None:
    """Add --server and the TLS/token flags."""
    g = p.add_argument_group("remote server")
    g.add_argument("--server", metavar="HOST:PORT", help="ask a running `twin serve` instead of evaluating here")
    g.add_argument("--token-file", help="file holding the bearer token (default: $TWIN_AUTH_TOKEN)")
    g.add_argument("--ca-file", help="PEM CA that signed the server certificate (turns TLS on)")
    g.add_argument("--cert-file", help="client certificate (PEM) for mutual TLS")
    g.add_argument("--key-file", help="client key (PEM) for mutual TLS")
    g.add_argument("--timeout", type=float, default=30.0, help="deadline per call, seconds (default 30)")


def client_from_args(args: argparse.Namespace):  # noqa: ANN201 - imports grpc lazily
    """A :class:`twin.client.TwinClient` for ``--server``."""
    with needs_extra("server", "talking to a running twin", field="--server"):
        from twin.client import client_from_env

    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise SpecError("--token-file", f"cannot read {args.token_file}: {err.strerror or err}") from err
    return client_from_env(args.server, token=token, ca_file=args.ca_file, cert_file=args.cert_file,
                           key_file=args.key_file, timeout_s=args.timeout)
