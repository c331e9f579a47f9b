"""Run a command as K ranks of one process group on this machine, as ``torchrun --standalone`` does, but passing
vitroll's exit status on: torchrun exits 1 whenever a rank exits otherwise than 0 (3 for some bad inputs
included), so a script around it cannot tell a bad image from a usage error or an interrupt.

Rank 0 talks (its stdout and stderr are this process's); the others are silent unless one ends otherwise than rank
0 did, when its stderr follows. Ctrl-C reaches the ranks once, through this process (they have a session of their
own, so a terminal's Ctrl-C does not reach them twice): each finishes its batch in flight and the run exits 130.

Under torchrun (or ``--processes``) a rank checks its machine's GPUs against the ranks on it
(:func:`check_torchrun_ranks`) and joins the process group, taking its own GPU (:func:`torchrun_group`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from vitroll.errors import OptionValueError
from vitroll.wording import argument, counted


AGREED_STATUSES = (0, 2, 3, 130)
"""What every rank of a run exits with together (ok, a user error, some inputs failed, interrupted): any other
status is a rank that crashed, and the others, which would wait for it at the next collective, are stopped."""


def under_torchrun() -> bool:
    """Whether torchrun (or ``--processes``) started this process as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def launched_rank() -> int:
    """This process's rank when torchrun (or ``--processes``) started it as one of several (``RANK`` where
    ``WORLD_SIZE`` > 1), else 0."""
    return int(os.environ.get("RANK", "0")) if under_torchrun() else 0


def ranks_on_cuda(device: str) -> bool:
    """Whether the ranks run on CUDA: ``device`` auto or cuda… on a machine with a GPU."""
    import torch

    return (device == "auto" or device.startswith("cuda")) and torch.cuda.is_available()


def rank_gpus(device: str) -> Optional[int]:
    """How many GPUs the ranks share out, rank k taking cuda:k (``device`` auto or cuda on CUDA); None when each
    rank does not take its own (the CPU, or a ``cuda:N`` the user named)."""
    import torch

    return torch.cuda.device_count() if ranks_on_cuda(device) and device in ("auto", "cuda") else None


def refuse_one_gpu_for_all(device: str, ranks_here: int) -> None:
    """Refuse ``ranks_here`` > 1 ranks on this machine with one ``device`` cuda:N for all: NCCL refuses two ranks on
    one GPU (each rank failed with a traceback).

    Raises
    ------
    OptionValueError
        Naming ``device`` and the devices that work.
    """
    if ranks_here > 1 and ranks_on_cuda(device) and device not in ("auto", "cuda"):
        raise OptionValueError(f"{argument('device', device)} puts all {ranks_here} ranks of this machine on one GPU, "
                               f"which NCCL refuses; give {argument('device', 'cuda')} (rank k takes cuda:k) or "
                               f"{argument('device', 'cpu')}")


def check_torchrun_ranks(device: str) -> None:
    """Under torchrun, refuse more ranks on this machine (``LOCAL_WORLD_SIZE``; else this rank's ``LOCAL_RANK``) than
    GPUs when rank k takes cuda:k (``torch.cuda.set_device`` failed with a traceback on each rank past the last GPU),
    and one cuda:N for them all (:func:`refuse_one_gpu_for_all`). Every rank sees the same count, so rank 0 tells
    it (:func:`leave_to_rank_zero`).

    Raises
    ------
    OptionValueError
        Naming the ranks and the GPUs.
    """
    gpus = rank_gpus(device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or local_rank + 1
    refuse_one_gpu_for_all(device, ranks_here)
    if gpus is not None and ranks_here > gpus:
        raise OptionValueError(f"torchrun started {ranks_here} ranks on this machine, more than its "
                               f"{counted(gpus, 'CUDA device')}, rank k taking cuda:k; give --nproc_per_node at most "
                               f"{gpus}, or {argument('device', 'cpu')}")


@contextmanager
def torchrun_group(device: str) -> Iterator[str]:
    """Under torchrun (``WORLD_SIZE`` > 1) and outside a process group: inside, this rank has joined one (NCCL on
    CUDA, else gloo) and leaves it after. Yields the device this rank runs on: ``device``, or its own GPU cuda:k
    (its ``LOCAL_RANK``) where ``device`` is auto or cuda on CUDA."""
    import torch

    if not under_torchrun() or torch.distributed.is_initialized():
        yield device
        return
    cuda = ranks_on_cuda(device)
    if cuda:
        if device in ("auto", "cuda"):
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    try:
        yield device
    finally:
        torch.distributed.destroy_process_group()


RANK_ZERO_PATIENCE_S = 60.0
"""How long a rank other than 0 waits for the launcher to stop it once rank 0 has told a mistake of the command line
(they all parse it): past that, rank 0 did not fail alike (another node's file system or devices), and it tells it."""


def leave_to_rank_zero(line: str, status: int) -> int:
    """On a rank other than 0, for a mistake every rank makes alike: wait until torchrun stops this rank, which it
    does once rank 0 has printed ``line`` (its :func:`~vitroll.io.names.error_line`) and exited, then exit ``status``
    (rank 0's, which torchrun reports); print ``line`` and return ``status`` if that has not happened after
    :data:`RANK_ZERO_PATIENCE_S`. A rank that exited at once had torchrun stop rank 0, on a loaded machine before it
    had printed anything."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(status))
    time.sleep(RANK_ZERO_PATIENCE_S)
    print(line, file=sys.stderr)
    return status


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_rank_count(processes: int, cuda_devices: Optional[int] = None) -> None:
    """Refuse more ranks than this machine can give one each: CPU cores (each rank is a Python process with its own
    model, and thousands ran out of open files), and on CUDA (``cuda_devices`` not None) GPUs, rank k taking cuda:k.

    Raises
    ------
    OptionValueError
        Naming ``processes`` and the most this machine takes.
    """
    cores = os.cpu_count() or 1
    if processes > cores:
        raise OptionValueError(f"{argument('processes', processes)}: more ranks than this machine's {cores} CPU cores, "
                               f"each a Python process with its own model; give at most {cores}")
    if cuda_devices is not None and processes > cuda_devices:
        raise OptionValueError(f"{argument('processes', processes)}: more ranks than this machine's "
                               f"{counted(cuda_devices, 'CUDA device')}, rank k taking cuda:k; give at most "
                               f"{cuda_devices}, or {argument('device', 'cpu')}")


def run_ranks(argv: Sequence[str], processes: int, cuda_devices: Optional[int] = None) -> int:
    """Run ``python -m vitroll *argv`` as ``processes`` ranks (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and a free
    ``MASTER_PORT`` on 127.0.0.1, as torchrun sets them) and return the run's exit status: rank 0's, or when rank 0
    ended with 0 the first other rank's that did not (a crashed rank killed by a signal: 128 + its number).
    More ranks than CPU cores, or on CUDA (``cuda_devices``, the GPUs the ranks take) than GPUs, is an
    :class:`~vitroll.errors.OptionValueError` before any starts (:func:`check_rank_count`)."""
    check_rank_count(processes, cuda_devices)
    package_root = str(Path(__file__).resolve().parents[2])  # the ranks import this very vitroll
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root,
                                                                             os.environ.get("PYTHONPATH")])),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
                   "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes)}
    with tempfile.TemporaryDirectory(prefix="vitroll-ranks-") as logs:
        errors = [open(os.path.join(logs, f"rank{rank}.err"), "w+b") for rank in range(1, processes)]
        ranks = [subprocess.Popen([sys.executable, "-m", "vitroll", *argv], start_new_session=True,
                                  env={**environment, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                                  stdout=None if rank == 0 else subprocess.DEVNULL,
                                  stderr=None if rank == 0 else errors[rank - 1])
                 for rank in range(processes)]
        statuses = _wait(ranks)
        status = statuses[0] if statuses[0] != 0 else next((s for s in statuses if s != 0), 0)
        for rank, error in enumerate(errors, start=1):
            if statuses[rank] != statuses[0]:
                error.seek(0)
                sys.stderr.write(error.read().decode("utf-8", "backslashreplace"))
            error.close()
    return status


def _wait(ranks: list[subprocess.Popen]) -> list[int]:
    """Every rank's exit status, once all have ended; Ctrl-C is passed on to them once, and a crashed rank (a
    status outside :data:`AGREED_STATUSES`) has the others stopped."""
    interrupted = False
    while True:
        try:
            statuses = [rank.poll() for rank in ranks]
            if all(status is not None for status in statuses):
                return [128 - status if status < 0 else status for status in statuses]
            if any(status is not None and status not in AGREED_STATUSES for status in statuses):
                for rank in ranks:
                    if rank.poll() is None:
                        rank.terminate()
            time.sleep(0.1)
        except KeyboardInterrupt:
            if not interrupted:
                interrupted = True
                for rank in ranks:
                    if rank.poll() is None:
                        rank.send_signal(signal.SIGINT)
