"""Command-line plumbing shared by the sub-commands of ``python -m ozaki_backend``.

* :class:`Parser`: an :class:`argparse.ArgumentParser` whose usage errors are one line
  on stderr naming the bad argument, with exit status 2 (never a traceback);
* argument types (:func:`int_at_least`, :func:`int_list`, :func:`float_list`,
  :func:`choice_list`) that check a value when it is parsed, so that a bad value is
  reported as such and not later, as a failure of the measurement it would feed;
* :class:`Progress`: a status line with an estimate of the time left, on stderr and only
  when stderr is a terminal (a log file or a pipe gets the program's output alone).

Nothing here imports more than the standard library: ``--help`` and a usage error
stay instant.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any, NoReturn


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``prog: error: message``.

    argparse prints the whole usage before the error; for a command with many options
    that buries the line that matters. Here the usage is printed only for errors of
    the top-level parser (``usage_on_error=True``: no command, an unknown one), where it
    is the answer. Sub-parsers made with ``add_subparsers`` are of this class too.
    """

    def __init__(self, *args: Any, usage_on_error: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.usage_on_error = usage_on_error

    def error(self, message: str) -> NoReturn:
        if self.usage_on_error:
            self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def int_at_least(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer ``>= lo`` (and ``<= hi`` when given); the message
    names the bounds."""
    bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be an integer {bound}; got {text!r}")
        return value
    parse.__name__ = f"integer {bound}"   # argparse names the type in some messages
    return parse


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _check_each(text: str, what: str, convert: Callable[[str], float],
                ok: Callable[[float], bool]) -> None:
    """Raise ``ArgumentTypeError`` naming the first comma-separated item of ``text``
    that ``convert`` rejects or whose value ``ok`` refuses."""
    for item in _items(text):
        try:
            good = ok(convert(item))
        except ValueError:
            good = False
        if not good:
            where = "" if item == text.strip() else f" in {text!r}"
            raise argparse.ArgumentTypeError(f"must be {what}; got {item!r}{where}")


def int_list(lo: int, hi: int | None = None) -> Callable[[str], str]:
    """An argparse type: comma-separated integers in ``[lo, hi]`` (``''`` for none).

    The text comes back unchanged (the commands split it where they use it); it is
    only checked here.
    """
    bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"

    def parse(text: str) -> str:
        _check_each(text, f"comma-separated integers {bound}", int,
                    lambda v: v >= lo and (hi is None or v <= hi))
        return text
    parse.__name__ = "integer list"
    return parse


def float_list(text: str) -> str:
    """An argparse type: comma-separated finite numbers, at least one (the text comes
    back)."""
    import math

    if not _items(text):
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers; got {text!r}")
    _check_each(text, "comma-separated numbers", float, math.isfinite)
    return text


def choice_list(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse type: comma-separated names out of ``choices``, at least one (the
    text comes back)."""
    def parse(text: str) -> str:
        items = _items(text)
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated names out of {', '.join(choices)}; got {text!r}")
        return text
    parse.__name__ = "name list"
    return parse


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    """A one-line status on stderr: items done, time spent, an estimate of the time left.

    Parameters
    ----------
    label : str
        What is measured (``"bench"``, ``"tune: GEMM paths"``).
    weights : iterable of float
        The expected cost of each item, in any unit (e.g. ``2 m n k``): the estimate of
        the time left is the time so far scaled by the weight left over the weight
        done, so a run of shapes from 1024³ to 16384³ is not estimated by counting.
    stream : file, optional
        Where the line goes (default ``sys.stderr``). The line is drawn only when the
        stream is a terminal; otherwise every method does nothing, so logs and pipes
        stay clean.
    clock : callable, optional
        Seconds (default :func:`time.perf_counter`).

    Notes
    -----
    The line is redrawn in place (carriage return) and cleared before anything else is
    printed through :meth:`wrap`, so it never mixes with the command's own output.
    """

    def __init__(self, label: str, weights: Iterable[float], *,
                 stream: IO[str] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.label = label
        self.weights = [max(float(w), 0.0) for w in weights]
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.active = bool(isatty and isatty())
        self.done = 0
        self.t0 = self.clock()
        self._width = 0

    @property
    def total(self) -> int:
        return len(self.weights)

    def status(self) -> str:
        """The status text (also when inactive; the tests read it)."""
        elapsed = self.clock() - self.t0
        text = f"{self.label}: {min(self.done, self.total)}/{self.total}, " \
               f"{_duration(elapsed)} so far"
        done_w = sum(self.weights[:self.done])
        left_w = sum(self.weights[self.done:])
        if self.done >= self.total:
            return text + ", finishing"
        if self.done and done_w > 0:
            text += f", about {_duration(elapsed * left_w / done_w)} left"
        return text

    def _draw(self) -> None:
        if not self.active:
            return
        text = self.status()
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        """Erase the status line (before other output goes to the terminal)."""
        if self.active and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def start(self) -> Progress:
        """Draw the line for the first time; returns ``self``."""
        self._draw()
        return self

    def step(self) -> None:
        """One item is done: redraw the line."""
        self.done += 1
        self._draw()

    def close(self) -> None:
        """Erase the line for good."""
        self.clear()
        self.active = False

    def wrap(self, log: Callable[[str], object], *,
             counts: Callable[[str], bool] | None = None) -> Callable[[str], None]:
        """``log`` that also advances the line: each message first clears the status
        line, is passed to ``log``, then counts as one item done (or, with ``counts``,
        only the messages for which ``counts(message)`` is true) and the line is
        redrawn."""
        def wrapped(message: str) -> None:
            self.clear()
            log(message)
            if counts is None or counts(message):
                self.step()
            else:
                self._draw()
        return wrapped
