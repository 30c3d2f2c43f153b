// The {{name}} plugin: each export of wit/{{name}}.wit is a function here, its parameters in WIT
// order (kebab-case names become lowerCamelCase); a function may be async. `moat build` checks
// them against the types it generates from the WIT into types/, bundles this file with its npm
// dependencies (esbuild) and makes the component (componentize-js). An error thrown as a string
// is the `err` of a WIT `result`.
//
// What the world imports from moat is a module here, typed too: after
// `import moat:plugin/log@0.1.0;` in the world, `import { log } from "moat:plugin/log@0.1.0";`.
// After `import moat:plugin/client@0.1.0;`, moat/client.ts asks the client in one line:
// `import { elicit, sample, roots } from "./moat/client";`.

export function greet(name: string): string {
    return `Hello, ${name}!`;
}
