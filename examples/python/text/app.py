"""Part of the text plugin of plugins/text, in Python: hashes, base64 and text statistics, with
the same WIT docs and the same answers. It logs what it does through `moat_plugin`, the Python
guest SDK that `moat build` puts beside it."""

import base64
import binascii
import hashlib

import moat_plugin
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.tools import Algorithm, Encoding, TextStats

log = moat_plugin.logger("text")


class Tools(exports.Tools):
    def hash(self, text: str, algorithm: Algorithm, encoding: Encoding | None) -> str:
        name = algorithm.name.lower()
        log.debug("hashing %d bytes with %s", len(text.encode()), name)
        digest = hashlib.new(name, text.encode()).digest()
        if encoding == Encoding.BASE64:
            return base64.b64encode(digest).decode()
        return digest.hex()

    def base64_encode(self, text: str, url_safe: bool | None) -> str:
        if url_safe:
            return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        return base64.b64encode(text.encode()).decode()

    def base64_decode(self, data: str) -> str:
        # Either alphabet, whitespace ignored, padding optional: made standard and padded here.
        core = "".join(data.split()).replace("-", "+").replace("_", "/").rstrip("=")
        standard = core + "=" * (-len(core) % 4)
        try:
            raw = base64.b64decode(standard, validate=True)
        except (binascii.Error, ValueError) as error:
            raise Err(f"not valid base64: {error}")
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise Err(f"the data decodes to {len(raw)} bytes that are not UTF-8 text")

    def stats(self, text: str) -> TextStats:
        # As Rust's `lines()`: a final line break starts no new line; an empty text has none.
        lines = 0 if not text else text.count("\n") + (0 if text.endswith("\n") else 1)
        return TextStats(characters=len(text), words=len(text.split()), lines=lines, bytes=len(text.encode()))
