#!/usr/bin/env python3
"""Drive an A2A 1.0 agent with the official Python SDK client (a2a-sdk).

    client.py --url BASE --binding jsonrpc|http_json|grpc [--token T]
              [--only SCENARIO[,SCENARIO...]] [--timeout SECONDS]

BASE is the agent's base URL (roostd: http://127.0.0.1:PORT/a2a/<route>); the
card is read from BASE/.well-known/agent-card.json. The agent must behave like
roost's conformance capsule (see benches/a2a_sdk/server.py). Only the SDK's
client API talks to the agent: ClientFactory + ClientConfig (one binding in
supported_protocol_bindings), send_message, get_task, list_tasks,
cancel_task, subscribe; errors are the SDK's exception classes.

Each scenario prints `ok <scenario>`; the first failure prints what was
expected and what came, and the script exits 1. At the end it prints
`N passed, 0 failed`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import traceback
import uuid

from collections.abc import AsyncIterator

import httpx

from a2a.client import (
    AuthInterceptor,
    Client,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotFoundError,
    TaskState,
)
from a2a.utils.constants import TransportProtocol


BINDINGS = {
    'jsonrpc': TransportProtocol.JSONRPC,
    'http_json': TransportProtocol.HTTP_JSON,
    'grpc': TransportProtocol.GRPC,
}

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
INTERRUPTED = {
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}

SCENARIOS = [
    'card',
    'send',
    'stream',
    'get',
    'list',
    'input-required',
    'cancel',
    'resubscribe',
    'reject',
    'errors',
]


class Failure(Exception):
    """A scenario's expectation that did not hold."""


def expect(cond: bool, what: str, expected: object, got: object) -> None:
    if not cond:
        raise Failure(f'{what}: expected {expected!r}, got {got!r}')


def state_name(state: int) -> str:
    return TaskState.Name(state)


def text_of(parts) -> str:
    return ''.join(p.text for p in parts if p.HasField('text'))


def artifact_text(task: Task, artifact_id: str = 'answer') -> str | None:
    for a in task.artifacts:
        if a.artifact_id == artifact_id:
            return text_of(a.parts)
    return None


class StaticToken(CredentialService):
    """Hands the one bearer token to every scheme the card declares."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_credentials(self, security_scheme_name, context):
        return self._token


def user_message(
    text: str, task_id: str | None = None, context_id: str | None = None
) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id or '',
        context_id=context_id or '',
    )


def send_request(
    text: str,
    *,
    return_immediately: bool = False,
    task_id: str | None = None,
    context_id: str | None = None,
) -> SendMessageRequest:
    return SendMessageRequest(
        message=user_message(text, task_id, context_id),
        configuration=SendMessageConfiguration(
            accepted_output_modes=['text/plain'],
            return_immediately=return_immediately,
        ),
    )


class StreamSummary:
    """What a stream of StreamResponse events added up to."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.task_id: str | None = None
        self.state: int | None = None
        self.status_text: str = ''
        self.artifact_updates = 0
        self.artifact_updates_before_final = 0
        self.artifacts: dict[str, str] = {}
        self.chunks: list[str] = []

    def add(self, ev: StreamResponse) -> None:
        kind = ev.WhichOneof('payload')
        self.events.append(kind or '?')
        if kind == 'task':
            t = ev.task
            self.task_id = t.id
            self.state = t.status.state
            self.status_text = text_of(t.status.message.parts)
            for a in t.artifacts:
                self.artifacts[a.artifact_id] = text_of(a.parts)
        elif kind == 'status_update':
            u = ev.status_update
            self.task_id = self.task_id or u.task_id
            self.state = u.status.state
            self.status_text = text_of(u.status.message.parts)
        elif kind == 'artifact_update':
            u = ev.artifact_update
            self.task_id = self.task_id or u.task_id
            self.artifact_updates += 1
            if self.state not in TERMINAL:
                self.artifact_updates_before_final += 1
            chunk = text_of(u.artifact.parts)
            self.chunks.append(chunk)
            aid = u.artifact.artifact_id
            # A2A semantics: append adds to the artifact, otherwise the
            # update replaces it (a final full artifact replaces the chunks).
            if u.append:
                self.artifacts[aid] = self.artifacts.get(aid, '') + chunk
            else:
                self.artifacts[aid] = chunk
        elif kind == 'message':
            self.status_text = text_of(ev.message.parts)

    def describe(self) -> str:
        return (
            f'events={self.events} state='
            f'{state_name(self.state) if self.state is not None else None}'
            f' artifacts={self.artifacts}'
        )


async def collect(
    stream: AsyncIterator[StreamResponse], deadline: float
) -> StreamSummary:
    summary = StreamSummary()

    async def run() -> None:
        async for ev in stream:
            summary.add(ev)

    try:
        await asyncio.wait_for(run(), timeout=deadline)
    except asyncio.TimeoutError:
        raise Failure(
            f'stream did not end within {deadline}s: {summary.describe()}'
        ) from None
    return summary


async def one_task(client: Client, req: SendMessageRequest) -> Task:
    """A non-streaming send_message: the single event must be a Task."""
    events = [ev async for ev in client.send_message(req)]
    expect(len(events) == 1, 'number of events of a blocking send', 1, len(events))
    kind = events[0].WhichOneof('payload')
    expect(kind == 'task', 'result of send_message', 'task', kind)
    return events[0].task


def insecure_channel(url: str):
    import grpc  # only the grpc binding needs grpcio

    return grpc.aio.insecure_channel(url)


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.binding = BINDINGS[args.binding]
        self.card: AgentCard | None = None
        self.sync: Client | None = None  # streaming=False: SendMessage
        self.streaming: Client | None = None  # SendStreamingMessage/Subscribe
        self.http: httpx.AsyncClient | None = None
        self.sent_task: Task | None = None

    async def setup(self) -> None:
        # One httpx client for everything, with a timeout longer than the
        # SDK's default (5 s); ClientFactory adds `A2A-Version: 1.0` to it.
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(self.args.timeout))
        interceptors = []
        if self.args.token:
            interceptors.append(AuthInterceptor(StaticToken(self.args.token)))

        def factory(streaming: bool) -> ClientFactory:
            return ClientFactory(
                ClientConfig(
                    streaming=streaming,
                    httpx_client=self.http,
                    supported_protocol_bindings=[self.binding],
                    use_client_preference=True,
                    accepted_output_modes=['text/plain'],
                    # gRPC: plain HTTP/2 to the card's host and port (the
                    # tenant, the route, comes from the card's interface).
                    grpc_channel_factory=insecure_channel,
                )
            )

        # The card is resolved once with the SDK's resolver, then both
        # clients are made from it.
        self.card = await A2ACardResolver(self.http, self.args.url).get_agent_card()
        if self.args.token and not self.card.security_requirements:
            # AuthInterceptor only sends credentials for schemes the card
            # declares; send the token anyway.
            self.http.headers['Authorization'] = f'Bearer {self.args.token}'
        self.sync = factory(False).create(self.card, interceptors)
        self.streaming = factory(True).create(self.card, interceptors)

    async def close(self) -> None:
        for c in (self.sync, self.streaming):
            if c is not None:
                await c.close()
        if self.http is not None:
            await self.http.aclose()

    # ---- scenarios -------------------------------------------------------

    async def s_card(self) -> None:
        card = self.card
        assert card is not None
        expect(bool(card.name), 'card.name', 'non-empty', card.name)
        expect(len(card.skills) > 0, 'number of card.skills', '>0', len(card.skills))
        expect(
            card.capabilities.streaming,
            'card.capabilities.streaming',
            True,
            card.capabilities.streaming,
        )
        bindings = [i.protocol_binding for i in card.supported_interfaces]
        expect(
            self.binding.value in bindings,
            'card.supportedInterfaces bindings',
            f'to contain {self.binding.value}',
            bindings,
        )
        v10 = [
            i
            for i in card.supported_interfaces
            if i.protocol_binding == self.binding.value
            and i.protocol_version.startswith('1.')
        ]
        expect(
            bool(v10),
            f'a {self.binding.value} interface with protocolVersion 1.x',
            'present',
            [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces],
        )

    async def s_send(self) -> None:
        task = await one_task(self.sync, send_request('hello'))
        expect(
            task.status.state == TaskState.TASK_STATE_COMPLETED,
            'state after a blocking send of "hello"',
            'TASK_STATE_COMPLETED',
            state_name(task.status.state),
        )
        got = artifact_text(task)
        expect(got == 'echo: hello', 'artifact "answer"', 'echo: hello', got)
        self.sent_task = task

    async def s_stream(self) -> None:
        s = await collect(
            self.streaming.send_message(send_request('hello')), self.args.timeout
        )
        expect(
            s.artifact_updates_before_final >= 1,
            'artifact updates before the final status',
            '>=1',
            s.describe(),
        )
        expect(
            s.state == TaskState.TASK_STATE_COMPLETED,
            'final state of the stream',
            'TASK_STATE_COMPLETED',
            s.describe(),
        )
        got = s.artifacts.get('answer')
        expect(
            got == 'echo: hello',
            'artifact "answer" assembled from the chunks',
            'echo: hello',
            s.describe(),
        )

    async def _ensure_sent(self) -> Task:
        if self.sent_task is None:
            await self.s_send()
        assert self.sent_task is not None
        return self.sent_task

    async def s_get(self) -> None:
        sent = await self._ensure_sent()
        task = await self.sync.get_task(GetTaskRequest(id=sent.id))
        expect(task.id == sent.id, 'GetTask id', sent.id, task.id)
        expect(
            task.status.state == TaskState.TASK_STATE_COMPLETED,
            'GetTask state',
            'TASK_STATE_COMPLETED',
            state_name(task.status.state),
        )
        user_texts = [
            text_of(m.parts) for m in task.history if m.role == Role.ROLE_USER
        ]
        expect(
            'hello' in user_texts,
            'user messages in the history',
            'to contain "hello"',
            user_texts,
        )
        got = artifact_text(task)
        expect(got == 'echo: hello', 'GetTask artifact "answer"', 'echo: hello', got)

    async def s_list(self) -> None:
        sent = await self._ensure_sent()
        ids: list[str] = []
        token = ''
        for _ in range(50):  # follow pages until the task shows up
            resp = await self.sync.list_tasks(
                ListTasksRequest(page_size=100, page_token=token)
            )
            ids += [t.id for t in resp.tasks]
            token = resp.next_page_token
            if sent.id in ids or not token:
                break
        expect(sent.id in ids, 'ListTasks ids', f'to contain {sent.id}', ids[:20])
        # contextId filter as well
        resp = await self.sync.list_tasks(
            ListTasksRequest(context_id=sent.context_id)
        )
        ids = [t.id for t in resp.tasks]
        expect(
            sent.id in ids,
            f'ListTasks(contextId={sent.context_id}) ids',
            f'to contain {sent.id}',
            ids,
        )

    async def s_input_required(self) -> None:
        # A blocking send returns as soon as the task is interrupted.
        task = await one_task(self.sync, send_request('ask'))
        expect(
            task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
            'state after "ask"',
            'TASK_STATE_INPUT_REQUIRED',
            state_name(task.status.state),
        )
        got = text_of(task.status.message.parts)
        expect(got == 'what next?', 'status message of "ask"', 'what next?', got)
        follow = await one_task(
            self.sync,
            send_request('blue', task_id=task.id, context_id=task.context_id),
        )
        expect(follow.id == task.id, 'task id of the follow-up', task.id, follow.id)
        expect(
            follow.status.state == TaskState.TASK_STATE_COMPLETED,
            'state after the follow-up "blue"',
            'TASK_STATE_COMPLETED',
            state_name(follow.status.state),
        )
        got = artifact_text(follow)
        expect(got == 'echo: blue', 'artifact "answer"', 'echo: blue', got)

    async def s_cancel(self) -> None:
        task = await one_task(self.sync, send_request('sleep', return_immediately=True))
        expect(
            task.status.state
            in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING),
            'state of "sleep" sent with returnImmediately',
            'SUBMITTED or WORKING',
            state_name(task.status.state),
        )
        canceled = await self.sync.cancel_task(CancelTaskRequest(id=task.id))
        expect(canceled.id == task.id, 'CancelTask id', task.id, canceled.id)
        expect(
            canceled.status.state == TaskState.TASK_STATE_CANCELED,
            'CancelTask state',
            'TASK_STATE_CANCELED',
            state_name(canceled.status.state),
        )
        again = await self.sync.get_task(GetTaskRequest(id=task.id))
        expect(
            again.status.state == TaskState.TASK_STATE_CANCELED,
            'GetTask state after cancel',
            'TASK_STATE_CANCELED',
            state_name(again.status.state),
        )

    async def s_resubscribe(self) -> None:
        started = time.monotonic()
        task = await one_task(self.sync, send_request('slow', return_immediately=True))
        expect(
            task.status.state not in TERMINAL,
            'state of "slow" sent with returnImmediately',
            'not terminal',
            state_name(task.status.state),
        )
        s = await collect(
            self.streaming.subscribe(SubscribeToTaskRequest(id=task.id)),
            self.args.timeout,
        )
        expect(
            s.task_id in (None, task.id),
            'task id of the subscription events',
            task.id,
            s.task_id,
        )
        expect(
            s.state == TaskState.TASK_STATE_COMPLETED,
            'final state of the subscription',
            'TASK_STATE_COMPLETED',
            s.describe(),
        )
        elapsed = time.monotonic() - started
        final = await self.sync.get_task(GetTaskRequest(id=task.id))
        got = artifact_text(final)
        expect(
            got == 'echo: slow',
            f'artifact "answer" of "slow" after {elapsed:.1f}s',
            'echo: slow',
            got,
        )

    async def s_reject(self) -> None:
        task = await one_task(self.sync, send_request('reject'))
        expect(
            task.status.state == TaskState.TASK_STATE_REJECTED,
            'state after "reject"',
            'TASK_STATE_REJECTED',
            state_name(task.status.state),
        )
        got = text_of(task.status.message.parts)
        expect(got == 'rejected', 'status message of "reject"', 'rejected', got)

    async def s_errors(self) -> None:
        try:
            task = await self.sync.get_task(GetTaskRequest(id='no-such-task'))
        except TaskNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            raise Failure(
                'GetTask("no-such-task"): expected TaskNotFoundError, got '
                f'{type(e).__module__}.{type(e).__name__}: {e}'
            ) from e
        else:
            raise Failure(
                'GetTask("no-such-task"): expected TaskNotFoundError, got a '
                f'task in {state_name(task.status.state)}'
            )

    # ----------------------------------------------------------------------

    async def run(self, names: list[str]) -> int:
        try:
            await self.setup()
        except Exception as e:  # noqa: BLE001
            print(f'FAIL setup: could not resolve the card / make the client: '
                  f'{type(e).__name__}: {e}')
            return 1
        passed = 0
        try:
            for name in names:
                fn = getattr(self, 's_' + name.replace('-', '_'))
                try:
                    await asyncio.wait_for(fn(), timeout=self.args.timeout * 2)
                except Failure as e:
                    print(f'FAIL {name}: {e}')
                    print(f'{passed} passed, 1 failed')
                    return 1
                except asyncio.TimeoutError:
                    print(f'FAIL {name}: no result within {self.args.timeout * 2}s')
                    print(f'{passed} passed, 1 failed')
                    return 1
                except Exception as e:  # noqa: BLE001
                    print(f'FAIL {name}: unexpected {type(e).__module__}.'
                          f'{type(e).__name__}: {e!r}')
                    if self.args.verbose:
                        traceback.print_exc()
                    print(f'{passed} passed, 1 failed')
                    return 1
                print(f'ok {name}', flush=True)
                passed += 1
        finally:
            await self.close()
        print(f'{passed} passed, 0 failed')
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description='A2A 1.0 scenarios through the a2a-sdk client'
    )
    parser.add_argument('--url', required=True, help='agent base URL')
    parser.add_argument('--binding', required=True, choices=sorted(BINDINGS))
    parser.add_argument('--token', default=None, help='bearer token')
    parser.add_argument(
        '--only',
        default='',
        help='comma-separated scenarios (default: all): ' + ','.join(SCENARIOS),
    )
    parser.add_argument('--timeout', type=float, default=30.0)
    parser.add_argument('-v', '--verbose', action='store_true')
    args = parser.parse_args()
    names = [n for n in args.only.split(',') if n] or SCENARIOS
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f'unknown scenario(s): {unknown}')
    return asyncio.run(Runner(args).run(names))


if __name__ == '__main__':
    sys.exit(main())
