#!/usr/bin/env python3
"""roostd as an agent of the A2A ITK: what the kit's launcher starts for 'roost'.

    roost_agent.py --httpPort H --grpcPort G --roostd BIN --roostctl BIN
                   --capsule DIR [--state DIR]

The kit reaches each agent at http://127.0.0.1:H: its card at
/.well-known/agent-card.json and the first JSON-RPC request at /jsonrpc/.
roostd serves every binding on one port (G here: HTTP/1.1 and HTTP/2, so gRPC
too) under /a2a/<route>; this starts it with the ITK agent capsule
(examples/itk-agent) as the route `itk` (also 0.3's gRPC default route), and
answers on H with the route's card and the JSON-RPC request passed to the
route. The card names roostd's own interfaces, which the kit's agents then
call directly. Ends roostd when it is told to end (SIGTERM, SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def start_roostd(args: argparse.Namespace, state: str) -> subprocess.Popen:
    config = os.path.join(state, 'roost.yaml')
    with open(config, 'w') as f:
        f.write(
            f'a2a_listen: 127.0.0.1:{args.grpcPort}\n'
            'a2a: {card_compat: merged, push: {allow: [127.0.0.1]}, '
            'grpc: {default_route: itk}}\n'
        )
    socket = os.path.join(state, 'roostd.sock')
    roostd = subprocess.Popen(
        [args.roostd, '--config', config, '--state-dir', os.path.join(state, 'state'),
         '--socket', socket],
        stdout=subprocess.DEVNULL if not args.verbose else None,
        stderr=subprocess.DEVNULL if not args.verbose else None,
    )
    for _ in range(200):
        done = subprocess.run(
            [args.roostctl, '--socket', socket, 'start', args.capsule],
            capture_output=True, text=True,
        )
        if done.returncode == 0:
            return roostd
        if roostd.poll() is not None:
            break
        import time
        time.sleep(0.1)
    roostd.terminate()
    sys.exit(f'roostd did not start the ITK agent: {done.stderr}')


def app(base: str) -> Starlette:
    route = f'{base}/a2a/itk'
    client = httpx.AsyncClient(timeout=httpx.Timeout(120.0))

    async def card(request: Request) -> Response:
        r = await client.get(f'{route}/.well-known/agent-card.json', headers={
            k: v for k, v in request.headers.items() if k.lower() == 'a2a-version'})
        return Response(r.content, status_code=r.status_code,
                        media_type='application/json')

    async def jsonrpc(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ('content-type', 'a2a-version', 'authorization', 'accept')}
        upstream = client.build_request('POST', route, content=body, headers=headers)
        r = await client.send(upstream, stream=True)
        if r.headers.get('content-type', '').startswith('text/event-stream'):
            async def relay():
                try:
                    async for chunk in r.aiter_raw():
                        yield chunk
                finally:
                    await r.aclose()
            return StreamingResponse(relay(), status_code=r.status_code,
                                     media_type='text/event-stream')
        content = await r.aread()
        await r.aclose()
        return Response(content, status_code=r.status_code,
                        media_type=r.headers.get('content-type', 'application/json'))

    async def health(_: Request) -> Response:
        return JSONResponse({'ok': True})

    return Starlette(routes=[
        Route('/.well-known/agent-card.json', card),
        Route('/jsonrpc', jsonrpc, methods=['POST']),
        Route('/jsonrpc/', jsonrpc, methods=['POST']),
        Route('/', jsonrpc, methods=['POST']),
        Route('/health', health),
    ])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument('--httpPort', type=int, required=True)
    p.add_argument('--grpcPort', type=int, required=True)
    p.add_argument('--roostd', required=True)
    p.add_argument('--roostctl', required=True)
    p.add_argument('--capsule', required=True)
    p.add_argument('--verbose', action='store_true')
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix='roost-itk-') as state:
        roostd = start_roostd(args, state)
        try:
            server = uvicorn.Server(uvicorn.Config(
                app(f'http://127.0.0.1:{args.grpcPort}'), host='127.0.0.1',
                port=args.httpPort, log_level='warning'))
            asyncio.run(server.serve())
        finally:
            roostd.terminate()
            try:
                roostd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                roostd.kill()


if __name__ == '__main__':
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main()
