#!/usr/bin/env python3
"""Ask an agent roostd hosts, with the official A2A Python SDK (a2a-sdk).

    python ask.py http://127.0.0.1:7420/a2a/helper "What is in the workdir?"
    python ask.py URL TEXT --stream          # print the answer as it streams
    ROOST_A2A_TOKEN=... python ask.py URL TEXT   # when the gateway wants a token

URL is the agent's base URL: roostd's A2A address (`roostctl status` shows
it) and `/a2a/<route>`, where the route is the session's name. The SDK reads
the agent card at URL/.well-known/agent-card.json and picks the binding
(JSON-RPC here). Exits 0 when the task completed (or waits for input), 1
when it failed, was canceled or rejected.

Install the SDK with `pip install -r tests/a2a-sdk/requirements.txt` (the
version roostd's tests use).
"""

import argparse
import asyncio
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.constants import TransportProtocol


def text_of(parts) -> str:
    return ''.join(p.text for p in parts if p.HasField('text'))


async def ask(url: str, text: str, stream: bool) -> int:
    headers = {}
    if token := os.environ.get('ROOST_A2A_TOKEN'):
        headers['Authorization'] = f'Bearer {token}'
    async with httpx.AsyncClient(timeout=300, headers=headers) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(
            ClientConfig(
                streaming=stream,
                httpx_client=http,
                supported_protocol_bindings=[TransportProtocol.JSONRPC],
            )
        ).create(card)
        request = SendMessageRequest(
            message=Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[Part(text=text)],
            )
        )
        state = None
        async for event in client.send_message(request):
            kind = event.WhichOneof('payload')
            if kind == 'task':
                task = event.task
                state = task.status.state
                for artifact in task.artifacts:
                    print(text_of(artifact.parts))
                if task.status.HasField('message'):
                    print(text_of(task.status.message.parts))
            elif kind == 'artifact_update':
                print(text_of(event.artifact_update.artifact.parts), end='', flush=True)
            elif kind == 'status_update':
                state = event.status_update.status.state
            elif kind == 'message':
                print(text_of(event.message.parts))
                state = TaskState.TASK_STATE_COMPLETED
        await client.close()
        print(f'[{TaskState.Name(state) if state is not None else "no task"}]')
        failed = (
            TaskState.TASK_STATE_FAILED,
            TaskState.TASK_STATE_CANCELED,
            TaskState.TASK_STATE_REJECTED,
        )
        return 1 if state in failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('url', help='the agent: http://HOST:PORT/a2a/ROUTE')
    parser.add_argument('text', help='the message')
    parser.add_argument('--stream', action='store_true', help='stream the answer')
    args = parser.parse_args()
    return asyncio.run(ask(args.url, args.text, args.stream))


if __name__ == '__main__':
    sys.exit(main())
