// The echo plugin of plugins/echo, in JavaScript: each export of wit/echo.wit is a function here,
// its parameters in WIT order (kebab-case names become lowerCamelCase).

export function echo(message) {
    return message;
}

// `separator` is `option<string>`: undefined when the caller leaves it out.
export function repeat(message, times, separator) {
    return Array(times).fill(message).join(separator ?? "");
}
