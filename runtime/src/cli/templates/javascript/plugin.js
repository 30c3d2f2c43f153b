// The {{name}} plugin: each export of wit/{{name}}.wit is a function here, its parameters in WIT
// order (kebab-case names become lowerCamelCase). `moat build` makes the component.

export function greet(name) {
    return `Hello, ${name}!`;
}
