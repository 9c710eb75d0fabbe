"""The debug endpoints (operations spec D.2): ``/debug/flags/v`` changes verbosity, loopback only;
and the global flags every component takes (D.1)."""

from __future__ import annotations

import io
import logging

from starlette.testclient import TestClient

from gpustack_operator import cli, logs
from kube import debug
from webhooks import server
from webhooks.lookups import FileLookups


def test_put_changes_the_level_from_loopback_only() -> None:
    root = logging.getLogger()
    before = root.level
    try:
        debug.set_verbosity(0)
        assert debug.answer("PUT", debug.FLAGS_V, "10.0.0.7", b"4")[0] == 403
        assert root.level == logging.INFO
        status, text = debug.answer("PUT", debug.FLAGS_V, "127.0.0.1", b"4\n")
        assert status == 200 and "verbosity set to 4 (was 0)" in text
        assert root.level == logging.DEBUG and debug.answer("GET", debug.FLAGS_V, "::1", b"") == (200, "4\n")
        assert debug.answer("PUT", debug.FLAGS_V, "127.0.0.1", b"loud")[0] == 400
        assert debug.answer("PUT", debug.FLAGS_V, "127.0.0.1", b"99")[0] == 400
        assert debug.answer("PUT", debug.FLAGS_V, "127.0.0.1", b"1")[0] == 200
        assert root.level == logging.INFO
    finally:
        root.setLevel(before)


def test_the_worker_app_refuses_a_remote_caller() -> None:
    app = server.create_app(FileLookups([]), webhooks=())
    with TestClient(app) as client:  # the test client's peer is "testclient", not loopback
        answer = client.put(debug.FLAGS_V, content=b"3")
        assert answer.status_code == 403 and "loopback" in answer.text
        assert client.get("/livez").status_code == 200


def test_threads_dump_names_this_thread() -> None:
    status, text = debug.answer("GET", debug.THREADS, "127.0.0.1", b"")
    assert status == 200 and "MainThread" in text


def test_global_flags_before_and_after_the_subcommand() -> None:
    args = cli.parser().parse_args(["worker", "-v=2", "--vmodule=controllers.pools=4", "--print-cmdline"])
    assert args.verbosity == 2 and args.vmodule == "controllers.pools=4" and args.print_cmdline
    args = cli.parser().parse_args(["--v=3", "w"])
    assert args.verbosity == 3 and args.command == "w"
    args = cli.parser().parse_args(["dm", "serve", "--manufacturer", "nvidia", "-v=2", "--logtostderr"])
    assert args.verbosity == 2 and args.logtostderr is True


def test_vmodule_sets_per_logger_levels() -> None:
    logger = logging.getLogger("controllers.pools")
    before = logger.level
    try:
        assert logs.apply_vmodule("controllers.pools=4,webhooks.*=1") == {
            "controllers.pools": 4,
            "webhooks": 1,
        }
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(before)
    try:
        logs.apply_vmodule("controllers.pools")
    except ValueError as error:
        assert "pattern=N" in str(error)
    else:  # pragma: no cover
        raise AssertionError("a pattern without =N must be refused")


def test_library_traffic_stays_out_of_debug_logs() -> None:
    """At -v 2 (the node agents' default) every logger logs DEBUG, but not pyroute2's netlink dumps
    nor the HTTP clients' request lines."""
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure(2, stream=out)
        logging.getLogger("pyroute2").setLevel(logging.NOTSET)  # what pyroute2's first import does
        logging.getLogger("pyroute2.netlink.core").debug("message {'attrs': ...}")
        logging.getLogger("nodeplugins.devicemanager").debug("ours")
    finally:
        debug.set_verbosity(0)
        root.handlers[:] = handlers
        root.setLevel(level)
    assert "attrs" not in out.getvalue() and "ours" in out.getvalue()
