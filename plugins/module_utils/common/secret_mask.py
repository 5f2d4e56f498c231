# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Mask what looks like a secret in a process's command line before it
reaches a module result, a capture or a report.

A miss leaks a key into a 0644 capture, a false mask only costs a word of
readability: the rules below mask generously.

Two passes over the argv words:
- inside each word: `NAME=VALUE` and `NAME: VALUE` pairs whose NAME names a
  secret (`HF_TOKEN=S`, `wandb.api_key=S`, `--env=OPENAI_API_KEY=S`,
  `"api_key": "S"`, `Authorization: Bearer S`, `?access_token=S`), the
  userinfo of URLs (`https://user:S@host`) and token shapes that are secrets
  by themselves (`hf_...`, `sk-...`, `ghp_...`, JWTs);
- over the whitespace-separated tokens of all words (a setproctitle title is
  one word with spaces): the values after a secret option (`--api-key K1 K2`
  until the next option, `--token K`, `--pass S`), `Bearer S` / `Basic S`,
  a glued `-pS`, and `-p S` / `-a S` of the programs where that is the
  password (sshpass, mysql, redis-cli).

Every loop is linear in the text (bounded look-back), so a 1 MiB cmdline
costs milliseconds. Standard library only (runs on targets).
"""

from __future__ import annotations

import functools
import re

MASK = "***"

# Words of an option or variable name that make its value a secret; a name
# part may also end in one of the suffixes (apikey, hftoken, oauth).
_SECRET_PARTS = frozenset((
    "key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd", "pass", "pwd", "passphrase",
    "auth", "authorization", "credential", "credentials", "cred", "creds", "bearer", "cookie", "sig", "signature",
))
_SECRET_SUFFIXES = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials")
_NAME_PART = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_NAME_LOOKBACK = 200
_PAIR_SEPARATOR = re.compile(r"[:=]")
# A text without any of these holds no secret name: its pairs need no look.
_SECRET_HINT = re.compile(r"key|token|secret|pass|pwd|auth|cred|bearer|cookie|sig", re.I)
_SCHEME_WORD = re.compile(r"(?:bearer|basic|token|digest|negotiate)\s+", re.I)
_UNQUOTED_VALUE = re.compile(r"[^\s,;&}\])\"']+")
_OPTION = re.compile(r"^(-{1,2})([A-Za-z][A-Za-z0-9_.\-]*)(=.*)?$", re.S)
_HEADER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*:$")
# Secrets recognisable by their shape alone (Hugging Face, OpenAI-style,
# GitHub, Slack, AWS access key ids, JSON web tokens).
_SECRET_SHAPE = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+)")
# Programs whose `-p VALUE` / `-a VALUE` is a password (elsewhere -p is a port or a flag).
_PASSWORD_SHORT_OPTIONS = {
    "sshpass": ("-p",), "mysql": ("-p",), "mysqldump": ("-p",), "mysqladmin": ("-p",), "mariadb": ("-p",),
    "mariadb-dump": ("-p",), "redis-cli": ("-a",), "mongo": ("-p",), "mongosh": ("-p",),
}
# -pS glued is a password unless it reads as a port or a port mapping (-p8000, docker's -p8000:8000/tcp).
_GLUED_PASSWORD = re.compile(r"^-p(?=.{2,}$)(?![0-9.:\[\]-]+(?:/(?:tcp|udp|sctp))?$)", re.S)


@functools.lru_cache(maxsize=1024)
def is_secret_name(name):
    """Whether an option, variable, header or JSON key name names a secret
    (api-key, HF_TOKEN, wandb.api_key, apiKey, X-Api-Key, Authorization)."""
    for part in _NAME_PART.findall(name or ""):
        part = part.lower().rstrip("0123456789") or part
        if part in _SECRET_PARTS or part.endswith(_SECRET_SUFFIXES):
            return True
    return False


def _name_before(text, index, floor):
    """The name that ends at text[index] (an optional closing quote
    between), looked back at most _NAME_LOOKBACK characters."""
    end = index
    if end > floor and text[end - 1] in "\"'":
        end -= 1
    start = end
    lowest = max(floor, end - _NAME_LOOKBACK)
    while start > lowest and text[start - 1] in _NAME_CHARS:
        start -= 1
    return text[start:end]


def _value_span(text, index, separator):
    """(start, end, quote) of the value after a secret name's separator at
    text[index]; a scheme word (Bearer, Basic) before it is kept."""
    start = index + 1
    if separator == ":":
        while start < len(text) and text[start].isspace():
            start += 1
        scheme = _SCHEME_WORD.match(text, start)
        if scheme:
            start = scheme.end()
    if start < len(text) and text[start] in "\"'":
        quote = text[start]
        close = text.find(quote, start + 1)
        return start + 1, (len(text) if close < 0 else close), quote
    value = _UNQUOTED_VALUE.match(text, start)
    return start, (value.end() if value else start), ""


def _mask_pairs(text):
    if not _SECRET_HINT.search(text):
        return text
    out = []
    done = 0
    for match in _PAIR_SEPARATOR.finditer(text):
        index = match.start()
        if index < done or not is_secret_name(_name_before(text, index, done)):
            continue
        start, end, dummy_quote = _value_span(text, index, match.group())
        if end > start:
            out.append(text[done:start] + MASK)
            done = end
    out.append(text[done:])
    return "".join(out)


def _mask_userinfo(text):
    """scheme://user:secret@host -> scheme://***@host (the user name may be a token too)."""
    out = []
    done = 0
    index = text.find("://")
    while index >= 0:
        start = index + 3
        end = start
        while end < len(text) and not text[end].isspace() and text[end] not in "/?#":
            end += 1
        at = text.rfind("@", start, end)
        if at > start:
            out.append(text[done:start] + MASK)
            done = at
        index = text.find("://", max(end, start))
    out.append(text[done:])
    return "".join(out)


def mask_word(text):
    """One argv word with its secret pairs, URL userinfo and secret-shaped tokens masked."""
    return _SECRET_SHAPE.sub(MASK, _mask_pairs(_mask_userinfo(text)))


def _program(words):
    first = words[0].split(None, 1)[0] if words and words[0].strip() else ""
    return first.rsplit("/", 1)[-1]


class _TokenMasker(object):
    """The state carried from token to token: masking the values of a
    secret option, or the one value after Bearer/Basic/Authorization: or
    a program's password short option."""

    def __init__(self, program):
        self.short = _PASSWORD_SHORT_OPTIONS.get(program, ())
        self.mode = None  # None | "first" | "more" | "one"

    def token(self, token):
        if self.mode == "first":
            self.mode = None
            if not (token.startswith("--") and len(token) > 2):
                self.mode = "more"
                return MASK
        elif self.mode == "more":
            if not token.startswith("-"):
                return MASK
            self.mode = None
        elif self.mode == "one":
            if _SCHEME_WORD.match(token + " "):
                return token
            self.mode = None
            return MASK
        return self._plain(token)

    def _plain(self, token):
        option = _OPTION.match(token)
        if option and is_secret_name(option.group(2)):
            if option.group(3) is None:
                self.mode = "first"
                return token
            self.mode = "more"
            return option.group(1) + option.group(2) + "=" + MASK
        if token in self.short:
            self.mode = "one"
            return token
        for short in self.short:
            if token.startswith(short) and len(token) > len(short):
                return short + MASK
        if _GLUED_PASSWORD.match(token):
            return "-p" + MASK
        bare = token.strip("\"'").lower()
        if bare in ("bearer", "basic") or (_HEADER_NAME.match(token) and is_secret_name(token[:-1])):
            self.mode = "one"
        return token


def mask_argv(words):
    """argv (list of str) with secrets masked; same number of words."""
    words = [mask_word(word) for word in words]
    masker = _TokenMasker(_program(words))
    out = []
    for word in words:
        pieces = re.split(r"(\s+)", word)
        out.append("".join(piece if (i % 2 or not piece) else masker.token(piece) for i, piece in enumerate(pieces)))
    return out


def mask_text(text):
    """A process title or name (one string, words separated by spaces) with secrets masked."""
    return mask_argv([text or ""])[0]
