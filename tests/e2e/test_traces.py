"""Traces of tool calls over OTLP/HTTP: a span per call, attributed as the MCP and gen_ai
semantic conventions have it, the child of the caller's `traceparent` from `_meta`.

The receiver is an OTLP/HTTP endpoint of the test's own, decoding what moat sends with the
OpenTelemetry project's protobuf definitions (`opentelemetry-proto`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from support import MODES, assert_text_only, free_port, http_transport, stop, wait_for_port

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
# Where an OTLP/HTTP exporter sends when no endpoint is given (http://localhost:4318).
OTLP_DEFAULT_PORT = 4318
PARENT_ID = "00f067aa0ba902b7"


class Receiver:
    """Collects the spans POSTed to /v1/traces."""

    def __init__(self, port: int = 0) -> None:
        self.spans: list[Any] = []
        self.resources: list[Any] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server name)
                receiver.requests += 1
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    receiver.resources.append(resource_spans.resource)
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend(scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int) -> list[Any]:
        deadline = time.monotonic() + 30
        while len(self.spans) < count:
            assert time.monotonic() < deadline, f"{len(self.spans)} spans arrived, not {count}"
            time.sleep(0.1)
        return self.spans


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


def attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = value.string_value if value.HasField("string_value") else value.int_value
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_each_call_is_a_span_under_the_callers_trace(
    moat_bin: Path, plugin: Callable[[str], Path], receiver: Receiver, tmp_path: Path, mode: str
) -> None:
    port = free_port()
    log = tmp_path / "moat.stderr"
    with log.open("w") as errlog:
        process = subprocess.Popen(
            [str(moat_bin), "serve", str(plugin("echo")), "--http", f"127.0.0.1:{port}",
             "--otlp-endpoint", receiver.url],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
            env={**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "100"},
        )
    try:
        wait_for_port(port, process, log)
        async with Client(http_transport(f"http://127.0.0.1:{port}/mcp"), mode=mode,
                          read_timeout_seconds=30) as client:
            traced = await client.call_tool(
                "echo_echo", {"message": "traced"},
                meta={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
            )
            assert_text_only(traced, "traced")
            bad = await client.call_tool("echo_repeat", {"message": "x", "times": -1})
            assert bad.is_error
        spans = receiver.wait_for(2)
    finally:
        stop(process)

    by_name = {span.name: span for span in spans}
    call = by_name["tools/call echo_echo"]
    assert call.trace_id.hex() == TRACE_ID and call.parent_span_id.hex() == PARENT_ID
    assert call.kind == call.SPAN_KIND_SERVER
    facts = attributes(call)
    assert facts["mcp.method.name"] == "tools/call"
    assert facts["gen_ai.operation.name"] == "execute_tool"
    assert facts["gen_ai.tool.name"] == "echo_echo"
    assert facts["moat.plugin"] == "echo" and facts["moat.outcome"] == "ok"
    assert facts["moat.principal"] == "local"
    assert "error.type" not in facts

    failed = by_name["tools/call echo_repeat"]
    assert failed.trace_id.hex() != TRACE_ID, "no traceparent: a trace of its own"
    assert attributes(failed)["error.type"] == "invalid_arguments"
    assert failed.status.code == failed.status.STATUS_CODE_ERROR

    service = {kv.key: kv.value.string_value for kv in receiver.resources[0].attributes}
    assert service["service.name"] == "moat"


async def test_traces_are_off_unless_asked_for(
    moat_bin: Path, plugin: Callable[[str], Path], receiver: Receiver, tmp_path: Path
) -> None:
    # A collector where an exporter nobody configured sends: OTLP/HTTP's default endpoint.
    try:
        default = Receiver(OTLP_DEFAULT_PORT)
    except OSError as error:
        pytest.fail(f"this test needs 127.0.0.1:{OTLP_DEFAULT_PORT}, OTLP's default port, free: {error}")
    # Quick batches, so spans sent unasked would arrive while the test looks.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(plugin("echo"))], env=env)
    try:
        with (tmp_path / "stderr").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=MODES[0]) as client:
                await client.call_tool("echo_echo", {"message": "untraced"})
                await asyncio.sleep(1)
        assert default.requests == 0 and not default.spans, "spans were sent without being asked for"
    finally:
        default.server.shutdown()
        default.server.server_close()
    # Over stdio too, when asked for: the endpoint from the environment.
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(plugin("echo"))], env=env)
    with (tmp_path / "stderr").open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=MODES[0]) as client:
            await client.call_tool("echo_echo", {"message": "traced"})
    spans = receiver.wait_for(1)
    assert len(spans) == 1 and attributes(spans[0])["moat.principal"] == "stdio"
