"""The gateway's admin API over HTTP: a bearer token in; JSON or the gateway's message out."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class AdminError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class AdminClient:
    def __init__(self, url: str, token: str, timeout_s: float = 300.0):
        self.url = url.rstrip("/")
        if "://" not in self.url:
            self.url = f"http://{self.url}"
        self.token = token
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                message = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                message = raw.decode(errors="replace") or exc.reason
            raise AdminError(exc.code, message) from None
        except urllib.error.URLError as exc:
            raise AdminError(0, f"cannot reach the gateway at {self.url}: {exc.reason}") from None
        return json.loads(raw) if raw.strip() else None
