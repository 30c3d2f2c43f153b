"""The echo plugin of plugins/echo, in Python: each export of wit/echo.wit (the JavaScript echo's
WIT) is a method here, built into a component by componentize-py for the benchmarks (P9)."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def echo(self, message: str) -> str:
        return message

    # `separator` is `option<string>`: None when the caller leaves it out.
    def repeat(self, message: str, times: int, separator: str | None) -> str:
        return (separator or "").join([message] * times)
