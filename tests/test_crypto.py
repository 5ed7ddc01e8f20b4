"""Signature and AES envelope: official vector, lark-oapi interop, tampering, replay window."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark_oapi.core.utils.decryptor import AESCipher

from bot.crypto import (
    CIPHERS_KEPT,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    DecryptError,
    SignatureError,
    SignatureVerifier,
    decrypt,
    encrypt,
    encrypted_body,
    sign,
    signature,
)


def test_official_test_vector() -> None:
    assert decrypt("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key") == "hello world"


@settings(deadline=None)  # no timing claims: a busy CI machine must not fail it
@given(st.text(min_size=0, max_size=300), st.text(min_size=1, max_size=40))
def test_lark_oapi_decrypts_what_we_encrypt(plain: str, key: str) -> None:
    assert AESCipher(key).decrypt_str(encrypt(plain, key)) == plain
    assert decrypt(encrypt(plain, key), key) == plain


def test_signature_matches_feishu_formula() -> None:
    import hashlib

    body = b'{"encrypt":"abc"}'
    expected = hashlib.sha256(b"1700000000" + b"nonce" + b"key" + body).hexdigest()
    assert signature("1700000000", "nonce", "key", body) == expected


@pytest.mark.parametrize("tamper", ["body", "signature", "timestamp"])
def test_tampered_requests_fail(tamper: str) -> None:
    body = encrypted_body({"a": 1}, "k")
    headers = sign(body, "k", now=1_000_000)
    if tamper == "body":
        body = body[:-2] + b"x}"
    elif tamper == "signature":
        headers[SIGNATURE_HEADER] = "0" * 64
    else:
        headers[TIMESTAMP_HEADER] = str(1_000_001)
    with pytest.raises(SignatureError):
        SignatureVerifier("k", 300, clock=lambda: 1_000_000).verify(headers, body)


@pytest.mark.parametrize(("age", "ok"), [(0, True), (299, True), (-299, True), (301, False), (-301, False)])
def test_timestamp_window(age: int, ok: bool) -> None:
    body = b"{}"
    headers = sign(body, "k", now=1_000_000 - age)
    verifier = SignatureVerifier("k", 300, clock=lambda: 1_000_000)
    if ok:
        verifier.verify(headers, body)
    else:
        with pytest.raises(SignatureError):
            verifier.verify(headers, body)


@pytest.mark.parametrize("token", ["not base64!!", "QUJD", encrypt("x", "other")[:20] + "==", "", "汉字",
                                   encrypt("x", "k")[:-4]],
                         ids=["not-base64", "short", "other-key", "empty", "cjk", "truncated"])  # IVs are random
def test_bad_ciphertext_is_a_decrypt_error(token: str) -> None:
    with pytest.raises(DecryptError):
        decrypt(token, "k")


def test_wrong_key_does_not_yield_plaintext() -> None:
    token = encrypt(json.dumps({"challenge": "c"}), "right")
    try:
        out = decrypt(token, "wrong")
    except DecryptError:
        return
    assert out != json.dumps({"challenge": "c"})


def test_each_thread_decrypts_with_the_key_it_is_given_among_many() -> None:
    """decrypt keeps a set-up cipher per thread and key (issue 32: setting AES up costs more than decrypting an
    event): more keys than it keeps, interleaved, from several threads, never borrow another key's cipher."""
    from concurrent.futures import ThreadPoolExecutor

    keys = [f"key-{i}" for i in range(CIPHERS_KEPT + 3)]
    tokens = {k: encrypt(f"plain for {k}", k) for k in keys}

    def run(offset: int) -> list[str]:
        order = keys[offset:] + keys[:offset]
        return [decrypt(tokens[k], k) for _ in range(3) for k in order]

    with ThreadPoolExecutor(4) as pool:
        for offset, got in enumerate(pool.map(run, range(4))):
            order = keys[offset:] + keys[:offset]
            assert got == [f"plain for {k}" for _ in range(3) for k in order]
