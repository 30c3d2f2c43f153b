"""The {{name}} plugin: each export of wit/{{name}}.wit is a method of `WitWorld` here, its
parameters in WIT order (kebab-case names become snake_case). `moat build` makes the component."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def greet(self, name: str) -> str:
        return f"Hello, {name}!"
