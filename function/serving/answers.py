"""Answers the server gave, kept by what was asked: a request seen before is answered without composing.

Crossplane calls the function again for every Federation on every poll and
on every event of an Object it composed, and most calls ask what was asked
before: nothing observed has changed. Composing is a pure function of the
request (the same Federation renders byte-identical resources), so the
answer to the same question is the one given before, and the server hands
it back without waking a worker: no hand-off, no decoding into dicts, no
composing. What is asked is the request without its tag, which Crossplane
makes new for every call and the answer only echoes.

Crossplane writes a request's maps (a Struct's fields, the observed
resources) in a different order on every call, so the key is a digest of
the request as protobuf writes it deterministically, maps in sorted order:
decoding and writing it again is protobuf's C code, a few hundredths of
what composing it takes.

Only answers without a fatal result are kept: those say the function could
not answer (a worker died, the answer was too large) or that the request
was refused, and the next call composes again. A request protobuf cannot
decode has no key and always goes to a worker, which says why. Kept
answers are bounded by their bytes; the least recently used go first.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.message import DecodeError

from function.serving import wire

# A 16-pool Federation's answer is about 80 KiB, a 128-pool one about 600 KiB:
# hundreds of Federations' answers in a pod whose limit is 1 GiB.
MAX_BYTES = 64 * 1024 * 1024

META = fnv1.RunFunctionResponse.DESCRIPTOR.fields_by_name["meta"].number


@dataclasses.dataclass(frozen=True)
class Asked:
    """What a request asks (key: a digest of it without its tag; None if it does not decode) and its tag."""

    key: bytes | None
    tag: str


@dataclasses.dataclass(frozen=True)
class _Kept:
    """An answer without its meta, and its meta without the tag: the tag is the next request's."""

    meta: fnv1.ResponseMeta
    rest: bytes


class Answers:
    """The answers given, by what was asked, at most max_bytes of them."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        """Keep up to max_bytes of answers (0: keep none)."""
        self.max_bytes = max_bytes
        self._kept: collections.OrderedDict[bytes, _Kept] = collections.OrderedDict()
        self._bytes = 0

    def asked(self, data: bytes) -> Asked:
        """What the serialized request asks."""
        try:
            req = fnv1.RunFunctionRequest.FromString(data)
        except DecodeError:
            return Asked(None, "")
        tag = req.meta.tag
        req.meta.ClearField("tag")
        return Asked(hashlib.blake2b(req.SerializeToString(deterministic=True), digest_size=16).digest(), tag)

    def answer(self, asked: Asked) -> bytes | None:
        """The answer given before to what asked asks, tagged as asked is; None if there is none."""
        kept = self._kept.get(asked.key) if asked.key is not None else None
        if kept is None:
            return None
        self._kept.move_to_end(asked.key)  # type: ignore[arg-type]  # not None: it was found
        meta = fnv1.ResponseMeta()
        meta.CopyFrom(kept.meta)
        meta.tag = asked.tag
        return wire.delimited(META, meta.SerializeToString()) + kept.rest

    def keep(self, asked: Asked, answer: bytes) -> None:
        """Keep answer for what asked asks, unless it has a fatal result, or is larger than all we keep."""
        if asked.key is None or len(answer) > self.max_bytes:
            return
        split = _split(answer)
        if split is None:
            return
        meta, rest = split
        if asked.key in self._kept:
            self._bytes -= len(self._kept.pop(asked.key).rest)
        self._kept[asked.key] = _Kept(meta, rest)
        self._bytes += len(rest)
        while self._bytes > self.max_bytes:
            _, dropped = self._kept.popitem(last=False)
            self._bytes -= len(dropped.rest)


def _split(answer: bytes) -> tuple[fnv1.ResponseMeta, bytes] | None:
    """The answer's meta (tag cleared) and its other fields' bytes; None if it has a fatal result or no meta first."""
    try:
        rsp = fnv1.RunFunctionResponse.FromString(answer)
    except DecodeError:
        return None
    if any(result.severity == fnv1.SEVERITY_FATAL for result in rsp.results):
        return None
    # Written by protobuf, which writes fields in their numbers' order: the meta first.
    split = wire.leading(answer, META)
    if split is None:
        return None
    meta = fnv1.ResponseMeta.FromString(split[0])
    meta.ClearField("tag")
    return meta, split[1]
