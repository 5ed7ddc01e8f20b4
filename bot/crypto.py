"""Feishu event crypto: signature (sha256 over ts+nonce+key+body) and AES-256-CBC envelopes.

Pure functions with an injectable clock. The tests and the sandbox sign with the same code the
ingress verifies with, so both sides of the wire agree by construction.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from Crypto.Cipher import AES

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"


class SignatureError(Exception):
    """The request is not signed by someone who knows the encrypt key, or is too old."""


class DecryptError(Exception):
    """The `encrypt` field is not a valid AES-256-CBC envelope for our key."""


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """Lowercase hex sha256 of timestamp + nonce + key + raw body, as Feishu computes it."""
    digest = hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body)
    return digest.hexdigest()


def sign(body: bytes, encrypt_key: str, *, now: float | None = None, nonce: str | None = None) -> dict[str, str]:
    """Headers Feishu would send with `body`."""
    ts = str(int(time.time() if now is None else now))
    nonce = nonce or os.urandom(8).hex()
    return {
        TIMESTAMP_HEADER: ts,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: signature(ts, nonce, encrypt_key, body),
    }


@dataclass(frozen=True)
class SignatureVerifier:
    """Constant-time signature check plus a timestamp window against replays."""

    encrypt_key: str
    window_seconds: int = 300
    clock: Callable[[], float] = time.time

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        ts, nonce, given = (headers.get(h) for h in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER))
        if not ts or not nonce or not given:
            raise SignatureError("missing signature headers")
        expected = signature(ts, nonce, self.encrypt_key, body)
        if not hmac.compare_digest(expected.encode(), given.strip().lower().encode()):
            raise SignatureError("signature mismatch")
        try:
            age = self.clock() - int(ts)
        except ValueError:
            raise SignatureError("timestamp is not an integer") from None
        if abs(age) > self.window_seconds:
            raise SignatureError("timestamp outside the allowed window")


def _key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode("utf-8")).digest()


_ciphers = threading.local()  # per thread: key → its AES block cipher (ECB), kept across requests
CIPHERS_KEPT = 8


def _block_cipher(encrypt_key: str) -> Any:
    """Setting up AES costs more than decrypting an event, so each thread keeps the few keys it has seen."""
    kept: dict[str, Any] = _ciphers.__dict__
    found = kept.get(encrypt_key)
    if found is None:
        if len(kept) >= CIPHERS_KEPT:
            kept.clear()
        found = kept[encrypt_key] = AES.new(_key(encrypt_key), AES.MODE_ECB)
    return found


def encrypt(plaintext: str, encrypt_key: str, *, iv: bytes | None = None) -> str:
    """base64(IV || AES-256-CBC(sha256(key), IV, pkcs7(plaintext)))."""
    iv = iv or os.urandom(16)
    raw = plaintext.encode("utf-8")
    pad = 16 - len(raw) % 16
    cipher = AES.new(_key(encrypt_key), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(raw + bytes([pad]) * pad)).decode("ascii")


def decrypt(token: str, encrypt_key: str) -> str:
    """Inverse of `encrypt`; strict about length and padding."""
    try:
        blob = base64.b64decode(token, validate=True)
    except (ValueError, TypeError):
        raise DecryptError("not base64") from None
    if len(blob) < 32 or len(blob) % 16:
        raise DecryptError("bad ciphertext length")
    body = blob[16:]
    # CBC by hand over the kept block cipher: each plaintext block is D(its ciphertext block) xor the ciphertext
    # block before it (the IV for the first), so the whole xor is one big-integer operation.
    mixed = int.from_bytes(_block_cipher(encrypt_key).decrypt(body), "big") ^ int.from_bytes(blob[:-16], "big")
    plain = mixed.to_bytes(len(body), "big")
    pad = plain[-1]
    if not 1 <= pad <= 16 or plain[-pad:] != bytes([pad]) * pad:
        raise DecryptError("bad padding")
    try:
        return plain[:-pad].decode("utf-8")
    except UnicodeDecodeError:
        raise DecryptError("plaintext is not UTF-8") from None


def encrypted_body(payload: Mapping[str, object], encrypt_key: str) -> bytes:
    """The exact bytes Feishu POSTs for an encrypted push."""
    plain = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return json.dumps({"encrypt": encrypt(plain, encrypt_key)}).encode("utf-8")
