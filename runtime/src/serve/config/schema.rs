//! The JSON Schema of `moat.toml`, and the patterns its strings are checked against there.

/// A tool name, as [`check_tool_name`](crate::wit::naming::check_tool_name) wants it.
pub(super) const TOOL_NAME_PATTERN: &str = r"^[A-Za-z0-9_-]{1,64}$";

/// A `source`: a path (with no `://`), or an `oci://`, `https://` or `http://` address.
pub(super) const SOURCE_PATTERN: &str =
    r"^(?:(?:oci|https?)://.+|(?:[^:]|:+(?:/:+)*(?:[^/:]|/[^/:]|/?$))+)$";

/// A `network` entry's shape, `[scheme://]host[:port][/]`; moat checks the rest (canonical IP
/// addresses, port range) when it reads the file.
pub(super) const NETWORK_PATTERN: &str = r"^(?:https?://)?(?:\*|(?:\*\.)?[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Za-z:._-]+\])(?::(?:\*|[0-9]+))?/?$";

/// A string in which every `${` starts an `${env:NAME}` or a `${secret:NAME}`.
pub(super) const EXPANDED_PATTERN: &str = r"^(?:[^$]|\$+(?:[^${]|$)|\$+\{(?:env|secret):[^}]+\})*$";

/// An `inject` value: as [`EXPANDED_PATTERN`], and `${credential:NAME}` too.
pub(super) const INJECTED_PATTERN: &str =
    r"^(?:[^$]|\$+(?:[^${]|$)|\$+\{(?:env|secret|credential):[^}]+\})*$";

/// An absolute guest path none of whose parts is `..`.
pub(super) const GUEST_PATH_PATTERN: &str = r"^(?:/(?:[^/]?|[^/.][^/]|\.[^/.]|[^/]{3,}))+$";

/// The JSON Schema of `moat.toml`, generated from the structs moat reads it into, so that it
/// says exactly what moat accepts; `moat config schema` prints it for editors.
pub fn json_schema() -> serde_json::Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .with_transform(schemars::transform::RecursiveTransform(without_null))
        .into_generator()
        .into_root_schema_for::<super::ConfigFile>()
        .to_value()
}

/// Drops the `null` that schemars allows for an `Option`: TOML has no null, and a setting is
/// left unset by leaving it out.
fn without_null(schema: &mut schemars::Schema) {
    use serde_json::Value;
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(alternatives)) = object.get_mut("anyOf") {
        alternatives.retain(|a| a.get("type").is_none_or(|t| t != "null"));
        if let [Value::Object(only)] = alternatives.as_slice() {
            let only = only.clone();
            object.remove("anyOf");
            for (key, value) in only {
                object.entry(key).or_insert(value);
            }
        }
    }
}
