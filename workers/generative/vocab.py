"""The character vocabulary of the example GPT: one token per character.

A fixed vocabulary (printable ASCII and the newline) rather than one derived from the training
text, so that any prompt encodes; characters outside it become ``?`` (``UNKNOWN``). Token 0 is
the newline, which also stands for the start of an empty prompt.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_CHARACTERS = "\n" + "".join(chr(c) for c in range(32, 127))
UNKNOWN = "?"


class CharVocab:
    """Characters ↔ token ids, as the model's ``architecture.json`` lists them."""

    def __init__(self, characters: str = DEFAULT_CHARACTERS):
        if len(set(characters)) != len(characters) or not characters:
            raise ValueError("the vocabulary must list distinct characters, at least one")
        self.characters = characters
        self._ids = {c: i for i, c in enumerate(characters)}
        self._unknown = self._ids.get(UNKNOWN, 0)

    def __len__(self) -> int:
        return len(self.characters)

    def encode(self, text: str) -> list[int]:
        ids = [self._ids.get(c, self._unknown) for c in text]
        return ids or [0]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.characters[i] for i in ids)
