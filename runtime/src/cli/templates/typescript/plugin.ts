// The {{name}} plugin: each export of wit/{{name}}.wit is a function here, its parameters in WIT
// order (kebab-case names become lowerCamelCase). `moat build` bundles it with its npm
// dependencies (esbuild) and makes the component (componentize-js).

export function greet(name: string): string {
    return `Hello, ${name}!`;
}
