"""A gateway on a thread of its own: for a Python process that holds the rayjet
connection (``rayjet.connect(gateway=...)``, the gateway actor, test harnesses)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from rayjet.errors import BadRequestError
from rayjet.gateway.jetstream import JetStreamBridge
from rayjet.gateway.server import Gateway, GatewayOptions

START_TIMEOUT = 60.0


class GatewayThread:
    """``start()`` listens (raises when the port cannot be had); ``stop()`` closes the
    listener and every connection. It can be started again after a stop."""

    def __init__(self, js: Any, options: GatewayOptions | None = None) -> None:
        self.js = js
        self.options = options or GatewayOptions()
        self.gateway: Gateway | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.gateway.port if self.gateway is not None else self.options.port

    @property
    def http_port(self) -> int | None:
        """The monitoring port it listens on (None: no monitoring)."""
        return self.gateway.http_port if self.gateway is not None else None

    def monitor_url(self) -> str | None:
        port = self.http_port
        if port is None:
            return None
        return f"http://{self.options.http_host or self.options.host}:{port}"

    def start(self) -> None:
        if self._thread is not None:
            return
        started: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(started,),
                                        name="rayjet-gateway", daemon=True)
        self._thread.start()
        try:
            started.result(START_TIMEOUT)
        except BaseException:
            self._thread.join(5.0)
            self._thread = None
            raise

    def _run(self, started: Future) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            # no connection: core NATS only, as nats-server without -js
            self.gateway = Gateway(self.options,
                                   JetStreamBridge(self.js) if self.js is not None else None)
            loop.run_until_complete(self.gateway.start())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            started.set_exception(exc)
            loop.close()
            return
        started.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def reload(self) -> None:
        """Read the configuration file again (raises ServerConfigError, keeping the old
        one, when it cannot be used)."""
        if self._loop is None or self.gateway is None:
            return
        done: Future = Future()

        def run() -> None:
            try:
                self.gateway.reload()
                done.set_result(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        done.result(30.0)

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self.gateway.stop(), self._loop)
        try:
            fut.result(30.0)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
            for bridge in self.gateway.bridges.values():
                bridge.pool.shutdown(wait=False, cancel_futures=True)
            self._thread = None
            self._loop = None


def serve(js: Any, gateway: bool | int | dict[str, Any] | GatewayOptions) -> GatewayThread:
    """Serve NATS clients for ``js`` from this process until ``js.close()``: ``True`` on
    127.0.0.1:4222, a port number, a dict of :class:`GatewayOptions` fields, or the options."""
    if gateway is True:
        options = GatewayOptions()
    elif isinstance(gateway, int) and not isinstance(gateway, bool):
        options = GatewayOptions(port=gateway)
    elif isinstance(gateway, dict):
        try:
            options = GatewayOptions(**gateway)
        except TypeError as exc:
            raise BadRequestError(f"invalid gateway options: {exc}") from None
    elif isinstance(gateway, GatewayOptions):
        options = gateway
    else:
        raise BadRequestError("gateway must be True, a port, a dict of GatewayOptions fields "
                              f"or GatewayOptions, not {gateway!r}")
    thread = GatewayThread(js, options)
    try:
        thread.start()
    except OSError as exc:
        raise BadRequestError(f"the gateway cannot listen on {options.host}:{options.port}: "
                              f"{exc.strerror or exc}") from None
    js.on_close(thread.stop)
    return thread
