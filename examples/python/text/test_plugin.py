"""Calls the built component through moat, as an MCP client would: `moat build`, then
`python -m unittest`."""

import json
import subprocess
import unittest


def call(tool: str, **arguments: object) -> dict:
    out = subprocess.run(
        ["moat", "call", "-v", "build/text.wasm", tool, json.dumps(arguments)],
        capture_output=True, text=True,
    )
    result = json.loads(out.stdout)
    result["stderr"] = out.stderr
    return result


class TextTest(unittest.TestCase):
    def test_hash_logs_through_the_sdk(self) -> None:
        result = call("text_hash", text="abc", algorithm="sha256")
        self.assertEqual(
            result["content"][0]["text"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        )
        self.assertIn("hashing 3 bytes with sha256", result["stderr"])

    def test_base64_both_ways(self) -> None:
        self.assertEqual(call("text_base64_encode", text="hé?", urlSafe=True)["content"][0]["text"], "aMOpPw")
        self.assertEqual(call("text_base64_decode", data="aMOpPw")["content"][0]["text"], "hé?")
        refused = call("text_base64_decode", data="a$b")
        self.assertTrue(refused["isError"])
        self.assertIn("not valid base64", refused["content"][0]["text"])

    def test_stats(self) -> None:
        stats = call("text_stats", text="two words\nand more\n")["structuredContent"]
        self.assertEqual(stats, {"characters": 19, "words": 4, "lines": 2, "bytes": 19})


if __name__ == "__main__":
    unittest.main()
