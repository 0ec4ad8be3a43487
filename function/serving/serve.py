"""Serving RunFunction over gRPC: the SDK's runtime.serve, with requests and responses left as bytes.

The SDK's server decodes each request before the function sees it. A
request protobuf cannot decode (a Federation nested deeper than its decoder
reads) fails there, with an UNKNOWN status that names no field, and
Crossplane shows only that. Taken as bytes, such a request gets a fatal
result naming the field (fn.undecodable). The worker processes are handed
the bytes as they came, with no decoding and encoding on the way; the server
decodes a request (protobuf's C code) only to know whether it was asked
before, and then answers it as it did then (function/serving/answers.py).

v1beta1's messages are v1's under another package name (the SDK converts
between them through their bytes), so both services share one handler.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from typing import Any

import grpc
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from grpc_reflection.v1alpha import reflection

from function.serving import answers, workers

SERVICES = tuple(module.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name for module in (fnv1, fnv1beta1))

# The SDK's: how long calls under way may take to finish once SIGTERM came.
GRACE_SECONDS = runtime.SHUTDOWN_GRACE_PERIOD_SECONDS


class FunctionRunner:
    """RunFunction's handler: requests and responses as bytes, each composed by a worker unless asked before."""

    def __init__(self, pool: workers.Pool, given: answers.Answers | None = None) -> None:
        """Compose each call in pool's thread or processes (function/serving/workers.py), remembering given answers."""
        self.pool = pool
        self.given = answers.Answers() if given is None else given

    async def RunFunction(  # noqa: N802 - the gRPC method name
        self, data: bytes, _: grpc.aio.ServicerContext[bytes, bytes]
    ) -> bytes:
        """Answer one serialized request with a serialized response: the one given before to the same question."""
        asked = self.given.asked(data)
        before = self.given.answer(asked)
        if before is not None:
            return before
        answer = await self.pool.run(data)
        self.given.keep(asked, answer)
        return answer


def serve(
    runner: FunctionRunner,
    address: str,
    *,
    creds: grpc.ServerCredentials | None,
    insecure: bool,
    options: Sequence[tuple[str, Any]],
) -> None:
    """Serve until SIGTERM, then answer the calls under way (for GRACE_SECONDS at most) and return.

    With insecure, serve without TLS whatever creds are; otherwise creds are needed.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = grpc.aio.server(options=options)
    # Before the port is bound: gRPC listens from then on, so a client (the kubelet's probe, a test) may
    # connect, and a SIGTERM sent then must stop the server as any other, not kill the process.
    loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(server.stop(grace=GRACE_SECONDS)))
    if insecure:
        server.add_insecure_port(address)
    elif creds is not None:
        server.add_secure_port(address, creds)
    else:
        msg = "no TLS credentials: give --tls-certs-dir, or --insecure"
        raise ValueError(msg)
    # No request deserializer or response serializer: bytes in, bytes out.
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(runner.RunFunction)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(service, {"RunFunction": handler}) for service in SERVICES]
    )
    reflection.enable_server_reflection((*SERVICES, reflection.SERVICE_NAME), server)

    async def run() -> None:
        await server.start()
        await server.wait_for_termination()

    try:
        loop.run_until_complete(run())
    finally:
        loop.run_until_complete(server.stop(grace=GRACE_SECONDS))
        loop.close()
