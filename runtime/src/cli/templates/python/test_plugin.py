"""Calls the built component through moat, as an MCP client would: `moat build`, then
`python -m unittest`."""

import json
import subprocess
import unittest


class GreetTest(unittest.TestCase):
    def test_greet_answers(self) -> None:
        out = subprocess.run(
            ["moat", "call", "build/{{name}}.wasm", "greet", json.dumps({"name": "moat"})],
            capture_output=True, text=True, check=True,
        )
        self.assertEqual(json.loads(out.stdout)["content"][0]["text"], "Hello, moat!")


if __name__ == "__main__":
    unittest.main()
