#!/usr/bin/env python3
"""An A2A 1.0 server built with the official Python SDK (a2a-sdk).

It hosts one agent that behaves like roost's conformance capsule, so the SDK
server and roostd can be measured side by side with the same traffic:

  "ask"    -> WORKING, then INPUT_REQUIRED with the agent message "what next?";
              the next user message on that task completes it with the
              artifact "answer" = "echo: <that text>".
  "sleep"  -> WORKING for up to 60 s unless canceled (then CANCELED); after
              60 s it completes with "echo: sleep".
  "slow"   -> WORKING, 5 chunks of the artifact "answer" ("tick 1" ..
              "tick 5", the first replaces, the rest append) 200 ms apart,
              then the whole artifact "echo: slow" (lastChunk) and COMPLETED.
  "reject" -> REJECTED with the agent message "rejected".
  X        -> WORKING, one chunk of "answer" = "echo: X", then the whole
              artifact again as the last chunk, then COMPLETED.

Both A2A 1.0 bindings are served from one base URL, http://127.0.0.1:PORT
(plus --path, empty by default):

  GET  {base}/.well-known/agent-card.json   agent card (also at /.well-known/…)
  POST {base}                               JSON-RPC 2.0 (SendMessage, …)
  {base}/message:send, /message:stream, /tasks, /tasks/{id},
  /tasks/{id}:cancel, /tasks/{id}:subscribe (GET or POST)   HTTP+JSON

Like roostd, a JSON-RPC request without the A2A-Version header is served as
A2A 0.3 (the SDK's compat adapter); HTTP+JSON is 1.0 only, and the SDK
refuses a 1.0 request that lacks `A2A-Version: 1.0` (VersionNotSupported).

With --grpc-port G, the gRPC binding too (lf.a2a.v1.A2AService on
127.0.0.1:G, plain HTTP/2), on the same handler and task store.

Usage: server.py --port P [--path /a2a/sdk] [--token T] [--grpc-port G]
                 [--protocol-version 0.3] [--log-level warning]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

import uvicorn

from starlette.applications import Starlette
from starlette.responses import JSONResponse

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_1_0,
    TransportProtocol,
)


ARTIFACT_ID = 'answer'
SLEEP_SECONDS = 60.0
SLOW_CHUNKS = 5
SLOW_INTERVAL = 0.2


class ConformanceExecutor(AgentExecutor):
    """The conformance capsule's behaviour on the SDK's AgentExecutor."""

    async def execute(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        text = context.get_user_input('')
        task = context.current_task
        if task is None:
            # First message of a task: the executor must enqueue the Task
            # before any status update (the SDK's ActiveTask enforces this).
            message = context.message
            task = Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message] if message is not None else [],
            )
            await event_queue.enqueue_event(task)

        updater = TaskUpdater(event_queue, task.id, task.context_id)

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            # The follow-up to "ask": answer it.
            await updater.start_work()
            await self._answer(updater, f'echo: {text}')
            return

        if text == 'reject':
            await updater.reject(
                updater.new_agent_message([Part(text='rejected')])
            )
            return

        await updater.start_work()

        if text == 'ask':
            await updater.requires_input(
                updater.new_agent_message([Part(text='what next?')])
            )
            return

        if text == 'sleep':
            # Cancellation cancels this coroutine (CancelledError) after
            # cancel() below has written CANCELED.
            await asyncio.sleep(SLEEP_SECONDS)
            await self._answer(updater, 'echo: sleep')
            return

        if text == 'slow':
            for i in range(1, SLOW_CHUNKS + 1):
                await updater.add_artifact(
                    [Part(text=f'tick {i}')],
                    artifact_id=ARTIFACT_ID,
                    name=ARTIFACT_ID,
                    append=i > 1,
                    last_chunk=False,
                )
                await asyncio.sleep(SLOW_INTERVAL)
            await updater.add_artifact(
                [Part(text='echo: slow')],
                artifact_id=ARTIFACT_ID,
                name=ARTIFACT_ID,
                append=False,
                last_chunk=True,
            )
            await updater.complete()
            return

        await self._answer(updater, f'echo: {text}')

    @staticmethod
    async def _answer(updater: TaskUpdater, answer: str) -> None:
        # One streamed chunk, then the whole answer as the last chunk (the
        # same event shape roostd produces for a one-delta answer).
        await updater.add_artifact(
            [Part(text=answer)],
            artifact_id=ARTIFACT_ID,
            name=ARTIFACT_ID,
            append=False,
            last_chunk=False,
        )
        await updater.add_artifact(
            [Part(text=answer)],
            artifact_id=ARTIFACT_ID,
            name=ARTIFACT_ID,
            append=False,
            last_chunk=True,
        )
        await updater.complete()

    async def cancel(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def build_card(
    base_url: str, bearer: bool = False, version: str = PROTOCOL_VERSION_1_0
) -> AgentCard:
    card = AgentCard(
        name='conformance',
        description='Echo agent with the behaviour of roost\'s conformance '
        'capsule (ask, sleep, slow, reject, echo), served by a2a-sdk.',
        version='0.1.0',
        supported_interfaces=[
            AgentInterface(
                url=base_url,
                protocol_binding=TransportProtocol.JSONRPC,
                protocol_version=version,
            ),
            AgentInterface(
                url=base_url,
                protocol_binding=TransportProtocol.HTTP_JSON,
                protocol_version=version,
            ),
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False
        ),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[
            AgentSkill(
                id='echo',
                name='echo',
                description='Answers "echo: <text>"; ask, sleep, slow and '
                'reject exercise input-required, cancel, streaming and '
                'rejection.',
                tags=['echo', 'conformance'],
                examples=['hello', 'ask', 'slow'],
            )
        ],
    )
    if bearer:
        # Declared like roostd does with a token file.
        card.security_schemes['bearer'].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme='Bearer'
                )
            )
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={'bearer': StringList(list=[])})
        )
    return card


class BearerAuth:
    """ASGI middleware: every request but the agent card needs the token."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = f'Bearer {token}'.encode()

    async def __call__(self, scope, receive, send):
        if scope['type'] == 'http' and not scope['path'].endswith(
            AGENT_CARD_WELL_KNOWN_PATH
        ):
            auth = dict(scope['headers']).get(b'authorization', b'')
            if auth != self.expected:
                response = JSONResponse(
                    {'error': 'unauthorized'},
                    status_code=401,
                    headers={'WWW-Authenticate': 'Bearer'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(
    port: int,
    path: str = '',
    token: str | None = None,
    grpc_port: int | None = None,
    version: str = PROTOCOL_VERSION_1_0,
):
    path = path.rstrip('/')
    if path and not path.startswith('/'):
        path = '/' + path
    base_url = f'http://127.0.0.1:{port}{path}'
    card = build_card(base_url, bearer=bool(token), version=version)
    handler = DefaultRequestHandler(
        agent_executor=ConformanceExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )

    routes = []
    routes += create_agent_card_routes(
        card, card_url=f'{path}{AGENT_CARD_WELL_KNOWN_PATH}'
    )
    if path:
        routes += create_agent_card_routes(card)
    routes += create_jsonrpc_routes(
        handler, rpc_url=path or '/', enable_v0_3_compat=True
    )
    if path:
        # POST {base}/ as well as {base}, like roostd.
        routes += create_jsonrpc_routes(
            handler, rpc_url=f'{path}/', enable_v0_3_compat=True
        )
    routes += create_rest_routes(handler, path_prefix=path)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette):
        grpc_server = None
        if grpc_port is not None:
            # The SDK's gRPC binding, on the same handler and task store.
            import grpc.aio

            from a2a.server.request_handlers import GrpcHandler
            from a2a.types import a2a_pb2_grpc

            grpc_server = grpc.aio.server()
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(
                GrpcHandler(handler), grpc_server
            )
            grpc_server.add_insecure_port(f'127.0.0.1:{grpc_port}')
            await grpc_server.start()
        yield
        if grpc_server is not None:
            await grpc_server.stop(None)
        await handler.aclose()

    app = Starlette(routes=routes, lifespan=lifespan)
    return BearerAuth(app, token) if token else app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument(
        '--path',
        default='',
        help='base path of the agent (default: none; e.g. /a2a/sdk)',
    )
    parser.add_argument(
        '--token',
        default=None,
        help='require `Authorization: Bearer TOKEN` (all but the card) and '
        'declare a bearer scheme in the card',
    )
    parser.add_argument(
        '--grpc-port',
        type=int,
        default=None,
        help='also serve the gRPC binding (plain HTTP/2) on this port',
    )
    parser.add_argument(
        '--protocol-version',
        default=PROTOCOL_VERSION_1_0,
        help='the A2A version the card declares for its interfaces (0.3: a '
        "peer that follows the card speaks 0.3's message/send, which the "
        'JSON-RPC endpoint serves through the compat adapter)',
    )
    parser.add_argument('--log-level', default='warning')
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper())
    app = build_app(
        args.port, args.path, args.token, args.grpc_port, args.protocol_version
    )
    uvicorn.run(
        app,
        host='127.0.0.1',
        port=args.port,
        log_level=args.log_level,
        access_log=False,
    )


if __name__ == '__main__':
    main()
