"""A TLS terminator for the tests: the Kafka broker the clients see speaks TLS only.

The embedded broker (Tansu 0.6.0) cannot serve TLS from its command line (README,
Security), so a test starts it on a loopback port known to nobody but this process,
advertising this terminator's address instead. Every client thus connects here: TLS
with this server certificate, and a client certificate signed by ``--ca``, or nothing.
Each accepted connection is logged with the client certificate's name and the
``client_id`` of its first Kafka request, so a test can see which clients came.

Run as a script: ``python tls_terminator.py --listen P --target Q --cert C --key K --ca A``.
Only the standard library: the test starts it with the interpreter that runs pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import struct
import sys

_HEADER = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length


def client_id(first: bytes) -> str:
    """The ``client_id`` of a Kafka request (its header's nullable string)."""
    if len(first) < _HEADER.size:
        return "?"
    length = _HEADER.unpack_from(first)[4]
    if length < 0:
        return "-"
    return first[_HEADER.size : _HEADER.size + length].decode("utf-8", "replace")


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


def serve(target: int) -> object:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        try:
            first = await reader.read(65536)
        except (ConnectionError, ssl.SSLError) as exc:
            print(f"refused: {exc}", flush=True)
            writer.close()
            return
        if not first:
            writer.close()
            return
        print(f"accepted: cn={','.join(names)} client_id={client_id(first)}", flush=True)
        upstream_reader, upstream = await asyncio.open_connection("127.0.0.1", target)
        upstream.write(first)
        await asyncio.gather(pipe(reader, upstream), pipe(upstream_reader, writer))

    return handle


async def main(args: argparse.Namespace) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=args.ca)
    context.load_cert_chain(args.cert, args.key)
    context.verify_mode = ssl.CERT_REQUIRED
    server = await asyncio.start_server(
        serve(args.target), "127.0.0.1", args.listen, ssl=context, ssl_handshake_timeout=10
    )
    print(f"listening on 127.0.0.1:{args.listen}, to 127.0.0.1:{args.target}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--listen", "--target"):
        parser.add_argument(name, type=int, required=True)
    for name in ("--cert", "--key", "--ca"):
        parser.add_argument(name, required=True)
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        sys.exit(0)
