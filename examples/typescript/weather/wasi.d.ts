// The one WASI interface the plugin calls itself (wit/deps/wasi-cli), as componentize-js links it.
declare module "wasi:cli/environment@0.2.3" {
    export function getEnvironment(): Array<[string, string]>;
}
