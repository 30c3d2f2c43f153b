"""The {{name}} plugin: each export of wit/{{name}}.wit is a method of `WitWorld` here, its
parameters in WIT order (kebab-case names become snake_case). `moat build` makes the component.

`moat_plugin`, the guest SDK `moat build` puts beside this file, gives moat's interfaces
Python's shape once the world imports them: `moat_plugin.logger()` sends `logging` records to
the client (`import moat:plugin/log@0.1.0;`), `moat_plugin.progress(done, total)` reports
progress, `moat_plugin.text(…)`, `image(…)`… make content blocks, and `moat_plugin.elicit(…)`,
`sample(…)` and `roots()` ask the client (`import moat:plugin/client@0.1.0;`)."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def greet(self, name: str) -> str:
        return f"Hello, {name}!"
