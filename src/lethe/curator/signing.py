"""The service's signing key and signed documents (Ed25519, through ``cryptography``).

The key is created on first use as 32 random bytes in ``<data_dir>/secrets/signing_key`` (owner-only, like the key
pepper; never published, never logged). Its public half is published (``GET /v1/keys``, ``GET /v1/status``, the
console's verify page) with a key id: the first 16 hex digits of SHA-256 of the raw public key.

A signed document is a JSON object with a ``signature`` member: ``{"alg": "Ed25519", "key_id", "public_key"
(base64 of the raw 32 bytes), "value" (base64 of the signature)}``. The signature covers the canonical JSON of the
document without its ``signature`` member (:func:`lethe.curator.chain.canonical_json`: sorted keys, no whitespace,
UTF-8). :func:`verify_document` checks one offline; it imports nothing of the store.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lethe.curator.chain import canonical_json

ALG = "Ed25519"
KEY_FILE = "signing_key"


def key_id(public_raw: bytes) -> str:
    """The key id: the first 16 hex digits of SHA-256 of the raw public key."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class SigningKey:
    """The service's Ed25519 key. ``SigningKey.load(path)`` creates it (0600, fsynced) on first use."""

    def __init__(self, private_raw: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        if len(private_raw) != 32:
            raise ValueError(f"an Ed25519 signing key is 32 bytes. Found {len(private_raw)}.")
        self._key = Ed25519PrivateKey.from_private_bytes(private_raw)
        self.public_raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = key_id(self.public_raw)

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        from lethe.curator.files import load_or_create_secret

        data = load_or_create_secret(path, 32)
        if len(data) != 32:
            raise RuntimeError(f"{path} is damaged: expected 32 secret bytes, found {len(data)}.")
        return cls(data)

    def public(self) -> dict[str, str]:
        """What is published: algorithm, key id and the raw public key (base64)."""
        return {"alg": ALG, "key_id": self.key_id, "public_key": _b64(self.public_raw)}

    def sign(self, document: dict[str, Any]) -> dict[str, Any]:
        """``document`` with its ``signature`` member (any previous one replaced)."""
        body = {k: v for k, v in document.items() if k != "signature"}
        sig = self._key.sign(canonical_json(body))
        return {**body, "signature": {**self.public(), "value": _b64(sig)}}

    def __repr__(self) -> str:  # never the private bytes
        return f"SigningKey(key_id={self.key_id!r})"


@dataclass(frozen=True)
class Verdict:
    """The result of :func:`verify_document`: ``valid``, and ``reason`` (why not, or what was checked)."""

    valid: bool
    reason: str
    key_id: str | None = None


def parse_public_key(text: str) -> bytes:
    """A public key as given by an auditor: base64 of the raw 32 bytes, 64 hex digits, or a PEM block."""
    t = text.strip()
    if t.startswith("-----BEGIN"):
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

        return load_pem_public_key(t.encode()).public_bytes(Encoding.Raw, PublicFormat.Raw)
    if len(t) == 64 and all(c in "0123456789abcdefABCDEF" for c in t):
        return bytes.fromhex(t)
    try:
        raw = base64.b64decode(t, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise ValueError("public_key must be an Ed25519 key: base64 of 32 bytes, 64 hex digits or PEM. "
                         f"Found {t[:20]!r}.")
    return raw


def verify_document(document: Any, *, public_key: bytes | None = None) -> Verdict:
    """Check a signed document offline. ``public_key``: the service's key as published (raw 32 bytes); without it
    the key embedded in the document is used, which proves the document unchanged since it was signed by *that* key —
    compare its ``key_id`` with the service's published one."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if not isinstance(document, dict):
        return Verdict(False, "not a certificate: expected a JSON object")
    sig = document.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("value"), str):
        return Verdict(False, "the document carries no signature")
    if sig.get("alg") != ALG:
        return Verdict(False, f"unknown signature algorithm {sig.get('alg')!r} (expected {ALG})")
    try:
        embedded = base64.b64decode(str(sig.get("public_key", "")), validate=True)
        value = base64.b64decode(sig["value"], validate=True)
    except ValueError:
        return Verdict(False, "the signature or its public key is not valid base64")
    if public_key is not None and embedded != public_key:
        return Verdict(False, f"signed by key {key_id(embedded) if embedded else '?'}, not by the trusted key "
                              f"{key_id(public_key)}", key_id(embedded) if embedded else None)
    raw = public_key if public_key is not None else embedded
    if len(raw) != 32:
        return Verdict(False, "the public key is not an Ed25519 key (32 bytes)")
    if sig.get("key_id") != key_id(raw):
        return Verdict(False, f"the key id {sig.get('key_id')!r} does not match the public key ({key_id(raw)})")
    body = {k: v for k, v in document.items() if k != "signature"}
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(value, canonical_json(body))
    except InvalidSignature:
        return Verdict(False, "the signature does not match the content: the certificate was changed after it "
                              "was signed", key_id(raw))
    trust = "the trusted key" if public_key is not None else "the key it names (compare with GET /v1/keys)"
    return Verdict(True, f"valid: signed by key {key_id(raw)}, {trust}", key_id(raw))


__all__ = ["ALG", "KEY_FILE", "SigningKey", "Verdict", "key_id", "parse_public_key", "verify_document"]
