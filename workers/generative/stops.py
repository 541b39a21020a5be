"""Stop strings over a growing text, as OpenAI defines them: the output ends before the first
occurrence of any stop string, which is not returned. Text that might be the start of a stop
string is held back until the next characters decide, so a streamed delta never has to be
taken back."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]):
        self._stops = stops
        self._text = ""
        self._sent = 0  # characters of _text already released
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The text that may be released after ``piece``; sets ``stopped`` on a stop string."""
        if self.stopped:
            return ""
        self._text += piece
        if not self._stops:
            return self._release(len(self._text))
        # A stop string can only end inside the new piece; search from where it could start.
        start = max(0, len(self._text) - len(piece) - max(map(len, self._stops)) + 1)
        hits = [i for s in self._stops if (i := self._text.find(s, start)) >= 0]
        if hits:
            self.stopped = True
            return self._release(min(hits))
        return self._release(len(self._text) - self._held())

    def flush(self) -> str:
        """What was held back, released at the end of a generation that did not stop."""
        return "" if self.stopped else self._release(len(self._text))

    def _held(self) -> int:
        """The longest tail of the text that is a proper prefix of some stop string."""
        for size in range(min(len(self._text), max(map(len, self._stops)) - 1), 0, -1):
            tail = self._text[-size:]
            if any(s.startswith(tail) for s in self._stops):
                return size
        return 0

    def _release(self, end: int) -> str:
        end = max(end, self._sent)
        out, self._sent = self._text[self._sent : end], end
        return out
