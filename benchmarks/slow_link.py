"""A TCP forwarder with a round-trip time and a bandwidth: a hub on loopback measured as if it were across a network.

Each direction delivers a chunk one-way-latency after its last byte could have crossed a link of the given rate, in
order, so a request-reply pays the round trip and a large value pays its size / rate.

  redis-server --port 6390 --save '' &
  python -m benchmarks slow_link --listen 6391 --to 127.0.0.1:6390 --rtt-ms 20 --mbps 100 &
  python -m benchmarks real_work --hub redis://127.0.0.1:6391/0 --cases ours_cold,ours_hub,ours_staged ...
"""

from __future__ import annotations

import asyncio
import time

from benchmarks.harness import Job, option


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, one_way_s: float, bytes_per_s: float):
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    free_at = 0.0  # when the link has sent what came before
    try:
        while data := await reader.read(65536):
            free_at = max(time.monotonic(), free_at) + len(data) / bytes_per_s
            await queue.put((free_at + one_way_s, data))
    finally:
        await queue.put((0.0, b""))
        await sender


async def _serve(listen: int, host: str, port: int, rtt_ms: float, mbps: float) -> None:
    one_way, rate = rtt_ms / 2000.0, mbps * 1e6 / 8

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, port)
        await asyncio.gather(
            _pipe(client_r, server_w, one_way, rate), _pipe(server_r, client_w, one_way, rate), return_exceptions=True
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


OPTIONS = [
    option("--listen", type=int, required=True, help="port to listen on (127.0.0.1)"),
    option("--to", required=True, help="HOST:PORT to forward to"),
    option("--rtt-ms", type=float, default=20.0, help="round-trip time added, ms (default 20)"),
    option("--mbps", type=float, default=100.0, help="bandwidth each way, Mbit/s (default 100)"),
]


def run(job: Job) -> None:
    host, port = job.args.to.rsplit(":", 1)
    asyncio.run(_serve(job.args.listen, host, int(port), job.args.rtt_ms, job.args.mbps))
