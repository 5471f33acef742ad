#!/usr/bin/env python3
"""Drive an agent with the official A2A Python SDK's 0.3 client (a2a-sdk 0.3.x).

    client03.py --url BASE --binding jsonrpc|http_json|grpc [--only S[,S...]]
                [--timeout SECONDS]

BASE is the agent's base URL (roostd: http://127.0.0.1:PORT/a2a/<route>); the
card is read from BASE/.well-known/agent-card.json as a 0.3 client reads it:
with no A2A-Version header, validated against 0.3's AgentCard. The agent
must behave like roost's conformance capsule (examples/a2a-conformance).
Only the SDK's client API talks to the agent: ClientFactory + ClientConfig
(one transport in supported_transports), send_message, get_task,
cancel_task, resubscribe, set_task_callback, get_task_callback.

Each scenario prints `ok <scenario>`; the first failure prints what was
expected and what came, and the script exits 1. At the end it prints
`N passed, 0 failed`. Run with tests/a2a-sdk/v03/requirements.txt installed
(scripts/python-sdk makes target/a2a-sdk03-venv).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import uuid

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import (
    AgentCard,
    DataPart,
    FilePart,
    FileWithBytes,
    GetTaskPushNotificationConfigParams,
    Message,
    MessageSendConfiguration,
    Part,
    PushNotificationConfig,
    Role,
    Task,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TaskState,
    TextPart,
    TransportProtocol,
)

BINDINGS = {
    'jsonrpc': TransportProtocol.jsonrpc,
    'http_json': TransportProtocol.http_json,
    'grpc': TransportProtocol.grpc,
}
SCENARIOS = ['card', 'send', 'stream', 'get', 'parts', 'cancel', 'resubscribe', 'push', 'errors']
TERMINAL = {
    TaskState.completed,
    TaskState.failed,
    TaskState.canceled,
    TaskState.rejected,
}
INSTRUCTION = bytes(range(256))


class Failure(Exception):
    """A scenario's expectation that did not hold."""


def expect(cond: bool, what: str, expected: object, got: object) -> None:
    if not cond:
        raise Failure(f'{what}: expected {expected!r}, got {got!r}')


def text_of(parts) -> str:
    return ''.join(p.root.text for p in parts or [] if isinstance(p.root, TextPart))


def answer(task: Task) -> str | None:
    for a in task.artifacts or []:
        if a.artifact_id == 'answer':
            return text_of(a.parts)
    return None


def message(text: str, *extra: Part) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.user,
        parts=[Part(root=TextPart(text=text)), *extra],
    )


def insecure_channel(url: str):
    import grpc  # only the grpc binding needs grpcio

    return grpc.aio.insecure_channel(url)


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(args.timeout))
        self.card: AgentCard | None = None
        self.sent: Task | None = None

    def client(self, streaming: bool):
        factory = ClientFactory(
            ClientConfig(
                streaming=streaming,
                httpx_client=self.http,
                supported_transports=[BINDINGS[self.args.binding]],
                accepted_output_modes=['text/plain'],
                # gRPC: plain HTTP/2 to the card's host and port.
                grpc_channel_factory=insecure_channel,
            )
        )
        return factory.create(self.card)

    async def one_task(self, m: Message, blocking: bool = True) -> Task:
        events = [
            ev
            async for ev in self.client(False).send_message(
                m, configuration=MessageSendConfiguration(blocking=blocking)
            )
        ]
        expect(len(events) == 1, 'events of a blocking send', 1, len(events))
        expect(isinstance(events[0], tuple), 'result of send_message', 'a task', events[0])
        return events[0][0]

    async def s_card(self) -> None:
        # A 0.3 client sends no A2A-Version: it reads the card without it.
        self.card = await A2ACardResolver(self.http, self.args.url).get_agent_card()
        transports = [self.card.preferred_transport] + [
            i.transport for i in self.card.additional_interfaces or []
        ]
        want = BINDINGS[self.args.binding].value
        expect(want in transports, 'card transports', f'to contain {want}', transports)

    async def s_send(self) -> None:
        task = await self.one_task(message('hello'))
        expect(task.status.state == TaskState.completed, 'state of "hello"', 'completed',
               task.status.state)
        expect(answer(task) == 'echo: hello', 'artifact "answer"', 'echo: hello', answer(task))
        self.sent = task

    async def s_stream(self) -> None:
        last = None
        updates = 0
        async for ev in self.client(True).send_message(message('hello')):
            expect(isinstance(ev, tuple), 'stream event', 'a (task, update) pair', ev)
            last, update = ev
            updates += update is not None
        expect(last is not None and last.status.state == TaskState.completed,
               'final state of the stream', 'completed', last and last.status.state)
        expect(updates >= 2, 'updates in the stream', '>=2', updates)
        expect(answer(last) == 'echo: hello', 'streamed artifact', 'echo: hello', answer(last))

    async def s_get(self) -> None:
        if self.sent is None:
            await self.s_send()
        task = await self.client(False).get_task(TaskQueryParams(id=self.sent.id))
        expect(task.id == self.sent.id, 'get_task id', self.sent.id, task.id)
        expect(task.status.state == TaskState.completed, 'get_task state', 'completed',
               task.status.state)
        users = [text_of(m.parts) for m in task.history or [] if m.role == Role.user]
        expect('hello' in users, 'user messages in the history', 'to contain "hello"', users)

    async def s_parts(self) -> None:
        # A file's bytes and a data part go in and come back as sent.
        blob = base64.b64encode(INSTRUCTION).decode()
        sent = message(
            'parts',
            Part(root=FilePart(file=FileWithBytes(
                bytes=blob, mime_type='application/x-protobuf', name='instruction.bin'))),
            Part(root=DataPart(data={'step': 1, 'nested': {'k': [1, 2]}})),
        )
        task = await self.one_task(sent)
        got = await self.client(False).get_task(TaskQueryParams(id=task.id, history_length=10))
        first = next((m for m in got.history or [] if m.role == Role.user), None)
        expect(first is not None, 'the user message in the history', 'present', got.history)
        files = [p.root for p in first.parts if isinstance(p.root, FilePart)]
        expect(len(files) == 1, 'file parts kept', 1, first.parts)
        f = files[0].file
        expect(isinstance(f, FileWithBytes) and base64.b64decode(f.bytes) == INSTRUCTION,
               'the file part\'s bytes', 'as sent', f)
        expect((f.mime_type, f.name) == ('application/x-protobuf', 'instruction.bin'),
               'the file part\'s type and name', 'as sent', (f.mime_type, f.name))
        data = [p.root.data for p in first.parts if isinstance(p.root, DataPart)]
        expect(data == [{'step': 1, 'nested': {'k': [1, 2]}}], 'data parts kept', 'as sent',
               data)

    async def s_cancel(self) -> None:
        task = await self.one_task(message('sleep'), blocking=False)
        expect(task.status.state not in TERMINAL, 'state of "sleep", not blocking',
               'not ended', task.status.state)
        canceled = await self.client(False).cancel_task(TaskIdParams(id=task.id))
        expect(canceled.status.state == TaskState.canceled, 'cancel_task state', 'canceled',
               canceled.status.state)
        again = await self.client(False).get_task(TaskQueryParams(id=task.id))
        expect(again.status.state == TaskState.canceled, 'state after cancel', 'canceled',
               again.status.state)

    async def s_resubscribe(self) -> None:
        task = await self.one_task(message('slow'), blocking=False)
        last = None
        async for ev in self.client(True).resubscribe(TaskIdParams(id=task.id)):
            last = ev[0] if isinstance(ev, tuple) else ev
        expect(last is not None and last.status.state == TaskState.completed,
               'final state of the resubscription', 'completed', last and last.status.state)
        done = await self.client(False).get_task(TaskQueryParams(id=task.id))
        expect(answer(done) == 'echo: slow', 'answer of "slow"', 'echo: slow', answer(done))

    async def s_push(self) -> None:
        # A receiver of our own: what a 0.3 agent's push receiver reads is
        # the whole task, in 0.3's shape, with the config's token.
        got: asyncio.Queue = asyncio.Queue()

        async def receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = (await reader.readuntil(b'\r\n\r\n')).decode('latin-1')
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(':') for line in head.split('\r\n')[1:] if line)
            }
            body = await reader.readexactly(int(headers.get('content-length', '0')))
            writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n')
            await writer.drain()
            writer.close()
            await got.put((headers, body))

        server = await asyncio.start_server(receive, '127.0.0.1', 0)
        port = server.sockets[0].getsockname()[1]
        url = f'http://127.0.0.1:{port}/notifications'
        try:
            task = await self.one_task(message('slow'), blocking=False)
            config = PushNotificationConfig(id='itk', url=url, token='itk-token')
            made = await self.client(False).set_task_callback(
                TaskPushNotificationConfig(task_id=task.id, push_notification_config=config))
            expect(made.push_notification_config.url == url, 'config url', url,
                   made.push_notification_config.url)
            back = await self.client(False).get_task_callback(
                GetTaskPushNotificationConfigParams(id=task.id, push_notification_config_id='itk'))
            expect((back.task_id, back.push_notification_config.token) == (task.id, 'itk-token'),
                   'config read back', (task.id, 'itk-token'),
                   (back.task_id, back.push_notification_config.token))
            state = None
            while state != TaskState.completed:
                headers, body = await asyncio.wait_for(got.get(), self.args.timeout)
                expect(headers.get('x-a2a-notification-token') == 'itk-token',
                       'the notification token', 'itk-token',
                       headers.get('x-a2a-notification-token'))
                pushed = Task.model_validate_json(body)
                expect(pushed.id == task.id, 'the pushed task id', task.id, pushed.id)
                state = pushed.status.state
            expect(answer(pushed) == 'echo: slow', 'the pushed task\'s answer', 'echo: slow',
                   answer(pushed))
        finally:
            server.close()

    async def s_errors(self) -> None:
        try:
            t = await self.client(False).get_task(TaskQueryParams(id='no-such-task'))
        except A2AClientError as e:
            said = str(e)
            expect('404' in said or '-32001' in said or 'not found' in said.lower(),
                   'the error for an unknown task', 'not found', said)
        except Exception as e:  # noqa: BLE001
            # The SDK's 0.3 gRPC transport raises grpc's own error.
            code = getattr(e, 'code', lambda: None)()
            expect(code is not None and code.name == 'NOT_FOUND',
                   'the gRPC status for an unknown task', 'NOT_FOUND', repr(e))
        else:
            raise Failure(f'get_task("no-such-task"): expected an error, got {t!r}')

    async def run(self, names: list[str]) -> int:
        passed = 0
        try:
            for name in names:
                try:
                    if name != 'card' and self.card is None:
                        await self.s_card()
                    await asyncio.wait_for(getattr(self, 's_' + name)(), self.args.timeout * 2)
                except Exception as e:  # noqa: BLE001
                    print(f'FAIL {name}: {type(e).__name__}: {e}')
                    print(f'{passed} passed, 1 failed')
                    return 1
                print(f'ok {name}', flush=True)
                passed += 1
        finally:
            await self.http.aclose()
        print(f'{passed} passed, 0 failed')
        return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument('--url', required=True)
    p.add_argument('--binding', choices=sorted(BINDINGS), required=True)
    p.add_argument('--only', default=','.join(SCENARIOS))
    p.add_argument('--timeout', type=float, default=30.0)
    args = p.parse_args()
    names = [n for n in args.only.split(',') if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f'unknown scenarios {unknown}; known: {SCENARIOS}')
        return 2
    return asyncio.run(Runner(args).run(names))


if __name__ == '__main__':
    sys.exit(main())
