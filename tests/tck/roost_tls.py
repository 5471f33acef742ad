"""A pytest plugin that lets the A2A TCK reach a server over TLS with a CA of
its own: `-p roost_tls` with this directory on PYTHONPATH and ROOST_TCK_CA
naming the CA's PEM file.

The TCK's HTTP clients (httpx) then trust that CA, and its gRPC client
(which always opens `grpc.insecure_channel`) opens a TLS channel trusting
it instead. Nothing else of the TCK changes: its requests, checks and
reports are its own.
"""

from __future__ import annotations

import os
import ssl

import grpc
import httpx

_CA = os.environ.get("ROOST_TCK_CA")


def _context() -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=_CA)
    return context


if _CA:
    with open(_CA, "rb") as f:
        _ROOTS = f.read()

    def _tls_channel(target, options=None, compression=None):
        credentials = grpc.ssl_channel_credentials(root_certificates=_ROOTS)
        return grpc.secure_channel(target, credentials, options=options, compression=compression)

    grpc.insecure_channel = _tls_channel

    for _cls in (httpx.Client, httpx.AsyncClient):
        _init = _cls.__init__

        def _patched(self, *args, __init=_init, **kwargs):
            # `httpx.get` and friends pass `verify=True` themselves.
            if kwargs.get("verify", True) is True:
                kwargs["verify"] = _context()
            __init(self, *args, **kwargs)

        _cls.__init__ = _patched
