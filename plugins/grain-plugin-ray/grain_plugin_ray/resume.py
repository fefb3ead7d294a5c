"""Where a replacement actor continues a dead one (``RayRuntime(max_restarts=...)``).

A :class:`ResumePoint` watches one worker's stream from the consumer's side: the commands the
consumer sends and the messages the channel receives. From them it knows, at any time, the
command that makes a fresh actor produce exactly the elements after the last one received:
``Start(generation, state, skip)`` with the state of the last :class:`Elements` received and its
skip advanced past them (the last state the dead actor acknowledged by sending it), or
``Idle(generation)`` once the stream ended or failed. It also hides the replacement from the
consumer: the new actor's messages are renumbered after the old one's (the consumer applies each
``seq`` once), its :class:`Template` is dropped when one was received already, and ``Consumed``
credits, which count elements of the whole generation, are made relative to the new actor's
start.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grain_core.author import Consumed, Elements, End, Failure, Idle, Start, Template

__all__ = ["ResumePoint"]


@dataclasses.dataclass
class ResumePoint:
    """One worker's resume point; see the module docstring. Used from the consumer's thread."""

    #: The command a replacement actor starts with (None: no Start / Idle sent yet).
    command: Start | Idle | None = None
    #: Elements received in the command's generation, from every actor so far.
    received: int = 0
    #: Elements of this generation received from actors before the current one.
    base: int = 0
    #: The current actor's ``seq`` 1 is the consumer's ``seq_base + 1``.
    seq_base: int = 0
    #: The highest ``seq`` handed to the consumer.
    last_seq: int = 0
    template_seen: bool = False
    #: The current actor replaces one whose template was received: its template is dropped.
    drop_template: bool = False
    #: The newest credit of the command's generation.
    consumed: Consumed | None = None

    def sent(self, message: Any) -> Any:
        """Records a command of the consumer; returns it as the current actor must receive it."""
        if isinstance(message, Start | Idle):
            if self.command is None or message.generation != self.command.generation:
                self.command, self.received, self.base, self.consumed = message, 0, 0, None
            return message
        if isinstance(message, Consumed):
            if self.command is not None and message.generation == self.command.generation:
                if self.consumed is None or message.elements > self.consumed.elements:
                    self.consumed = message
            return dataclasses.replace(message, elements=max(0, message.elements - self.base))
        return message  # Stop

    def received_message(self, message: Any) -> Any:
        """Records a message of the current actor; returns it renumbered for the consumer, or None
        when the consumer must not see it (a replacement's template). A message received again
        (after an interrupted receive) is returned again and not counted twice."""
        message = dataclasses.replace(message, seq=message.seq + self.seq_base)
        fresh = message.seq > self.last_seq
        self.last_seq = max(self.last_seq, message.seq)
        if isinstance(message, Template):
            if self.drop_template:
                return None
            self.template_seen = True
            return message
        cmd = self.command
        if not fresh or cmd is None or getattr(message, "generation", None) != cmd.generation:
            return message
        if isinstance(message, Elements) and isinstance(cmd, Start):
            n = len(message.elements)
            pos = message.position_after(n)
            self.command = Start(cmd.generation, pos.state, pos.skip)
            self.received += n
        elif isinstance(message, End | Failure):
            self.command = Idle(cmd.generation)
        return message

    def replacement(self) -> list[Any]:
        """Starts counting for a new actor; returns the commands to send it first (each through
        :meth:`sent` again is harmless)."""
        self.seq_base = self.last_seq
        self.base = self.received
        self.drop_template = self.template_seen
        out: list[Any] = []
        if self.command is not None:
            out.append(self.command)
            if self.consumed is not None and self.consumed.elements > self.base:
                out.append(self.consumed)
        return out
