"""SPARQL and N-Triples terms built from raw strings: IRIs, literals and ``VALUES`` blocks.

Raw input (entity names, ids, relation labels) never enters query text except through these
functions. Literals escape every character the SPARQL/N-Triples string grammars give meaning to
(``"``, ``\\``, newlines, carriage returns) and write every non-ASCII or control character as a
``\\uXXXX`` / ``\\UXXXXXXXX`` escape, so the query text is plain ASCII whatever the server's
charset handling. IRIs percent-encode every character the ``IRIREF`` production forbids (and
``%`` itself), which makes :func:`local_name` the exact inverse of :func:`iri_local`.
"""

from __future__ import annotations

from typing import Iterable
from urllib.parse import unquote

_IRI_FORBIDDEN = set('<>"{}|^`\\% ')
_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_string(text: str) -> str:
    """The body of a double-quoted literal: quote, backslash and line breaks escaped, non-ASCII
    and control characters as ``\\u``/``\\U`` escapes (valid in SPARQL and N-Triples)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _LITERAL_ESCAPES:
            out.append(_LITERAL_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return "".join(out)


def literal(text: str, lang: str | None = None) -> str:
    """A string literal term, optionally language-tagged (``"x"@en``)."""
    if lang is not None and not (lang.replace("-", "").isalnum() and lang.isascii()):
        raise ValueError(f"language tag {lang!r} must be letters, digits and '-'")
    return f'"{escape_string(text)}"' + (f"@{lang}" if lang else "")


def encode_local(name: str) -> str:
    """Percent-encode the characters an IRI may not hold (UTF-8 bytes), and ``%`` itself."""
    out = []
    for ch in name:
        if ch in _IRI_FORBIDDEN or ord(ch) <= 0x20 or ord(ch) == 0x7F or not ch.isascii():
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def decode_local(text: str) -> str:
    """Inverse of :func:`encode_local`."""
    if "%" not in text:
        return text
    return unquote(text, encoding="utf-8", errors="strict")


def iri(value: str) -> str:
    """An IRI term ``<...>`` for an absolute IRI; raises ValueError on characters IRIs forbid."""
    bad = sorted({ch for ch in value if ch in '<>"{}|^`\\ ' or ord(ch) <= 0x20})
    if bad or not value:
        raise ValueError(f"{value!r} is not a valid IRI (forbidden characters {bad}); encode it with iri_local")
    return f"<{value}>"


def iri_local(namespace: str, name: str) -> str:
    """The IRI term for ``name`` under ``namespace`` (``ns:m.0abc`` → ``<http://.../ns/m.0abc>``)."""
    return iri(namespace + encode_local(name))


def local_name(namespace: str, value: str) -> str | None:
    """The raw name of an IRI under ``namespace`` (None for IRIs outside it)."""
    if not value.startswith(namespace):
        return None
    return decode_local(value[len(namespace):])


def values_block(var: str, terms: Iterable[str]) -> str:
    """``VALUES ?var { t1 t2 ... }`` over already-built terms (from :func:`iri` / :func:`literal`)."""
    if not var.isidentifier():
        raise ValueError(f"variable name {var!r} must be an identifier")
    return f"VALUES ?{var} {{ {' '.join(terms)} }}"
