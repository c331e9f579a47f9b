"""``vitroll app``: the interactive explorer in the browser (Gradio; ``pip install "vitroll[app]"``). Upload or pick an
image, choose the method and its options, a single head or a target class, and see the overlay, every head of a
layer and the top classes. Served on this machine only (127.0.0.1) unless --share-on-network is given."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from vitroll.commands.arguments import (
    DEFAULT_COLORMAP, add_alpha_argument, add_map_scaling_arguments, add_max_pixels_argument, add_model_arguments,
    colormap, given_path, integer,
)

SAMPLE_IMAGES = Path(__file__).resolve().parents[2] / "sample_images"
"""The repository's sample images, offered as examples when vitroll runs from a checkout."""

LARGEST_PORT = 65535


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                        help="address to serve on (default 127.0.0.1: this machine only; another needs "
                             "--share-on-network)")
    parser.add_argument("--port", type=port_number, metavar="PORT", help="port (default: the first free one from 7860)")
    parser.add_argument("--share-on-network", action="store_true",
                        help="allow a --host that other machines can reach (no password: anyone there can use it)")
    rendering = parser.add_argument_group("rendering")
    rendering.add_argument("--cmap", type=colormap, default=DEFAULT_COLORMAP, metavar="COLORMAP",
                           help="the colormap the page starts with (a matplotlib name; default: %(default)s)")
    add_alpha_argument(rendering)
    add_map_scaling_arguments(rendering)
    parser.add_argument("--examples", default=SAMPLE_IMAGES, type=lambda text: Path(given_path(text)),
                        metavar="FOLDER",
                        help="images offered as examples (default: the repository's sample_images/, when present)")
    add_max_pixels_argument(parser)
    add_model_arguments(parser)
    parser.set_defaults(run=run)


def port_number(text: str) -> int:
    """An argparse ``type`` for ``--port``: 1 … 65535."""
    port = integer(1)(text)
    if port > LARGEST_PORT:
        raise argparse.ArgumentTypeError(f"must be a port number ≤ {LARGEST_PORT}; got {port}")
    return port


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_host(host: str, share_on_network: bool) -> None:
    """Refuse a ``host`` beyond this machine unless ``share_on_network``; with it, one warning line on stderr."""
    if is_loopback(host):
        return
    if not share_on_network:
        raise ValueError(f"app: --host {host} would serve the explorer to other machines, without a password; pass "
                         "--share-on-network to allow it, or leave --host at 127.0.0.1 (this machine only)")
    print(f"vitroll: warning: --share-on-network: the explorer on {host} can be used by anyone who can reach this "
          "machine (no password)", file=sys.stderr)


def check_port(host: str, port: int) -> None:
    """Refuse ``port`` on ``host`` when it cannot be served on (bound as the server will bind it), before a model that
    may take minutes to load; Gradio's own refusal names its environment variables and ``launch()``."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise ValueError(f"app: port {port} on {host} is in use (another server, or an explorer still "
                                 "running); pass another --port, or leave it out for the first free one from 7860"
                                 ) from None
            raise ValueError(f"app: cannot serve on {host} port {port} ({error.strerror or error})") from None


def run(args: argparse.Namespace) -> int:
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from vitroll.app import PRIVATE_CACHE, build_app, example_images, require_gradio, serve
    from vitroll.commands.common import model_from_args, preprocessing_from_args
    from vitroll.models import class_names
    from vitroll.pipelines.explain import ExplainSettings

    check_host(args.host, args.share_on_network)
    if args.port is not None:
        check_port(args.host, args.port)
    if args.examples != SAMPLE_IMAGES and not args.examples.is_dir():
        raise ValueError(f"app: --examples {args.examples} is not a folder")
    with PRIVATE_CACHE, stopped_as_by_ctrl_c():  # from Gradio's import on: nothing it copies outlives the command
        require_gradio()
        model = model_from_args(args)
        examples = example_images(args.examples)
        app = build_app(model, model_label=args.model, preprocessing=preprocessing_from_args(model, args),
                        class_names=class_names(model, args.class_names), examples=examples,
                        settings=ExplainSettings(cmap=args.cmap, alpha=args.alpha, interpolation=args.upsample,
                                                 normalization=args.normalize),
                        max_pixels=args.max_pixels)
        serve(app, host=args.host, port=args.port, examples=examples)
    return 0


@contextmanager
def stopped_as_by_ctrl_c() -> Iterator[None]:
    """Within: SIGTERM (``kill``, a service manager's stop) ends the explorer as Ctrl-C does, its copies of the
    uploads removed; by default it ended the process there and then, leaving them on disk."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may handle signals
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
