"""Credentials kept out of every text beliefdrift stores or prints: `redact` replaces with `***` the user part of a URL
(`http://user:KEY@host`), a URL query parameter naming a key, token, secret or password (`?api_key=KEY`), a credential
setting (`token=KEY` in `--model-args`), and every secret registered while the process runs (`register_secret`: an
API key read from the environment, `environment_secret`).

Where it applies: the run identity (`runs.identity.run_identity`, so run.sqlite's config, every summary, table and
page made from it, train's identity.json and rollouts/meta.json), train's config.yaml (`config.options.as_mapping`),
`paper`'s stages.json and stage listing, the CLI's error line and `--debug` traceback, a bug's messages, and every
log message the CLI prints (`RedactingFilter`). The stored form is stable: a URL whose key changed names the same run.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
import urllib.parse
from typing import Any

from beliefdrift.errors import UserError

#: What a credential is replaced with.
MASK = "***"
#: Secrets shorter than this are not replaced in texts: replacing one to three characters would garble every text,
#: and a key that short protects nothing.
MIN_SECRET_LENGTH = 4

#: `scheme://userinfo@`: everything up to the authority's last `@` (a password may hold one).
_USERINFO = re.compile(r"(?P<lead>\b[a-z][a-z0-9+.-]*://)[^/?#\s]*@", re.IGNORECASE)
#: A URL query parameter whose name mentions a key, token, secret, password, signature or credential.
_QUERY = re.compile(r"(?P<lead>[?&;][^=&#\s]*(?:key|token|secret|pass|pwd|sig|auth|credential)[^=&#\s]*=)"
                    r"(?:\*\*\*|[^&#\s]*)", re.IGNORECASE)
#: A credential setting written `name=value` (from_pretrained's `token=`, `api_key=`), as a whole word.
_SETTING = re.compile(r"(?P<lead>(?:^|(?<=[\s,;'\"]))(?:api[_-]?key|(?:access|auth|hf)[_-]?token|token|password|"
                      r"(?:client[_-]?)?secret)=)[^,;\s&#'\"]*", re.IGNORECASE)

_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Replace `value` (an API key) by `MASK` in every text `redact` cleans from now on, in the whole process."""
    if len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def register_url_secrets(url: str) -> None:
    """Register (`register_secret`) the credentials `url` carries: its user part's password (or token), the HTTP
    Basic credentials made of it (base64 of `user:password`, as a client sends and a server may echo), and the values
    of query parameters `redact` would mask."""
    parts = urllib.parse.urlsplit(url)
    if parts.password or parts.username:
        userinfo = parts.netloc.rpartition("@")[0]
        register_secret(parts.password or parts.username or "")
        for form in (userinfo, urllib.parse.unquote(userinfo)):
            register_secret(base64.b64encode(form.encode()).decode())
    for match in _QUERY.finditer("?" + parts.query):
        register_secret(match[0].removeprefix(match["lead"]))


def redact(text: str) -> str:
    """`text` with every credential (see the module's docstring) replaced by `MASK`; idempotent."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)  # a key that holds another is replaced whole
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(rf"\g<lead>{MASK}@", text)
    text = _QUERY.sub(rf"\g<lead>{MASK}", text)
    return _SETTING.sub(rf"\g<lead>{MASK}", text)


def redacted(value: Any) -> Any:
    """`value` (plain data: strings, lists, tuples, mappings) with `redact` applied to every string in it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    if isinstance(value, dict):
        return {key: redacted(item) for key, item in value.items()}
    return value


def environment_secret(variable: str, setting: str) -> str:
    """The secret held by the environment variable `variable` (named by `setting`, e.g. `--model-args
    api_key_env=VAR`), registered (`register_secret`); a UserError that never shows the value when it is unset or
    empty, or holds anything but printable ASCII without spaces (an HTTP header cannot carry a line break)."""
    value = os.environ.get(variable)
    if not value:
        raise UserError(f"{setting}: the environment variable {variable} is not set")
    register_secret(value)
    bad = next((i for i, char in enumerate(value) if not " " < char < "\x7f"), None)
    if bad is not None:
        char = value[bad]
        what = ("a line break" if char in "\r\n" else "a space" if char == " " else "a non-ASCII character"
                if ord(char) > 0x7f else "a control character")
        raise UserError(f"{setting}: {variable} holds {what} (character {bad + 1} of {len(value)}; the value is not "
                        "shown); expected a key of printable ASCII characters on one line")
    return value


class RedactingFilter(logging.Filter):
    """Removes credentials (`redact`) from each record's message; on a handler, it cleans every record the handler
    prints, from any logger below the one it serves."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
