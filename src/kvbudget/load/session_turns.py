"""Multi-turn sessions on a live server: a turn's prompt is the previous turn's prompt, the answer
the server gave and a new user message; open-loop turns wait for the turn before them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    """A finished turn of a session: what the next turn builds on."""

    prompt: str
    messages: tuple[tuple[str, str], ...]
    output: str
    ok: bool
    done_s: float


def join_text(*pieces: str) -> str:
    """Pieces joined with one space where neither side has whitespace (a session's history)."""
    out = ""
    for piece in pieces:
        if out and piece and not out[-1].isspace() and not piece[0].isspace():
            out += " "
        out += piece
    return out


def compose(history: Answer | None, user: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(completions prompt, chat messages) of a turn: the history, then the new user message."""
    if history is None:
        return user, (("user", user),)
    prompt = join_text(history.prompt, history.output, user)
    return prompt, (*history.messages, ("assistant", history.output), ("user", user))


class Sessions:
    """Each session's finished turns, awaited by the next turn (open loop)."""

    def __init__(self) -> None:
        self._answers: dict[tuple[str, int], asyncio.Future[Answer]] = {}

    def _future(self, session: str, turn: int) -> asyncio.Future[Answer]:
        key = (session, turn)
        if key not in self._answers:
            self._answers[key] = asyncio.get_running_loop().create_future()
        return self._answers[key]

    def done(self, session: str, turn: int, answer: Answer) -> None:
        fut = self._future(session, turn)
        if not fut.done():
            fut.set_result(answer)

    async def wait(self, session: str, turn: int) -> Answer:
        return await self._future(session, turn)
